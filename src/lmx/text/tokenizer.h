// lmx::Tokenizer: Hugging Face tokenizer.json (BPE) encode/decode with the exact results of HF
// tokenizers, plus the special tokens and chat template of the model directory.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lmx {

namespace text {
struct TokenizerImpl;
}

// Immutable after load; every const method is thread-safe. Copies share the loaded data.
//
// Invalid UTF-8 input: encode() first replaces each maximal invalid byte subsequence by U+FFFD,
// which is what a Python caller of HF tokenizers gets from bytes.decode("utf-8", "replace") (a
// Python str cannot hold invalid UTF-8), so ids match HF on such input too.
class Tokenizer {
 public:
  // Loads `model_dir`/tokenizer.json (required) and, when present, tokenizer_config.json,
  // special_tokens_map.json and chat_template.jinja / chat_template.json. Throws IoError for an
  // unreadable tokenizer.json, FormatError naming the file and component for malformed content
  // and unknown component types, Unsupported for HF features lmx lacks (non-BPE models, dropout).
  static Tokenizer load(const std::string& model_dir);
  // Builds a tokenizer from tokenizer.json text alone (no config files); `name` prefixes errors.
  static Tokenizer from_json(std::string_view tokenizer_json, const std::string& name = "tokenizer.json");

  // Token ids of `text`: added tokens are matched first, the rest goes through normalizer,
  // pre-tokenizer and BPE; the post-processor adds special tokens (BOS...) when asked.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Text of `ids` through the decoder (HF's decode, no clean-up of tokenization spaces). Special
  // tokens are dropped when `skip_special_tokens`. Always valid UTF-8. Throws InvalidArgument
  // naming the first id that is not in the vocabulary (HF silently skips those).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // Id of a token string (added tokens first, then the model vocab), or -1.
  int32_t token_to_id(std::string_view token) const;
  // Token string of an id (added tokens first). Throws InvalidArgument for an unknown id.
  std::string id_to_token(int32_t id) const;
  // Whether `id` can be decoded.
  bool is_valid_id(int32_t id) const;
  // Whether decode(..., skip_special_tokens=true) drops `id`.
  bool is_special(int32_t id) const;
  // One past the largest id of the model vocab and added tokens (the size of an id table).
  int32_t vocab_size() const;

  // Special tokens from tokenizer_config.json / special_tokens_map.json, and their ids when the
  // vocabulary has them.
  const std::optional<std::string>& bos_token() const;
  const std::optional<std::string>& eos_token() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  // The default chat template (Jinja source; "" when the model directory has none) and all
  // templates by name.
  const std::string& chat_template() const;
  const std::map<std::string, std::string>& chat_templates() const;

  // The loaded components (text layer internals).
  const text::TokenizerImpl& impl() const { return *impl_; }

 private:
  explicit Tokenizer(std::shared_ptr<const text::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const text::TokenizerImpl> impl_;
};

}  // namespace lmx
