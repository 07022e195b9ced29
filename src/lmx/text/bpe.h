// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}), with HF tokenizers' exact merge
// order, byte fallback, unk fusing, ignore_merges and subword prefix/suffix.
#pragma once

#include "lmx/text/tokenizer_hash.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::text {

class JsonScanner;

class BpeModel {
 public:
  // Parses the model object at the scanner's position (its '{'). Throws FormatError naming the
  // field (bad vocab entry, merge referring to a token not in the vocab, ...) and Unsupported for
  // other model types and for dropout > 0.
  static std::unique_ptr<BpeModel> parse(JsonScanner& json);

  // Appends the ids of one pre-tokenized word (valid UTF-8). An empty word gives no ids.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  // The id of a vocab token, or -1.
  int32_t token_to_id(std::string_view token) const { return vocab_.find(token); }
  // The vocab token of `id`, or nullopt.
  std::optional<std::string_view> id_to_token(int32_t id) const;
  // Number of vocab entries (HF's Model::get_vocab_size).
  size_t vocab_count() const { return vocab_.size(); }
  // One past the largest id in the vocab.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_.size()); }
  const std::optional<std::string>& unk_token() const { return unk_token_; }
  size_t merge_count() const { return merges_.size(); }

 private:
  BpeModel() = default;
  std::string_view store(std::string_view token);
  void parse_vocab(JsonScanner& json);
  void parse_merges(JsonScanner& json);
  void finish_setup();

  // HF's BPE::merge_word + word_to_tokens on a whole word (no cache, no ignore_merges).
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;
  // merge_word through the per-thread cache; `h` is hash_bytes(word).
  void merge_word_cached(std::string_view word, uint64_t h, std::vector<int32_t>& ids) const;
  // Applies merges to initial symbols in place (lowest rank first, leftmost among equal ranks).
  void apply_merges(std::vector<int32_t>& symbols) const;
  void apply_merges_heap(std::vector<int32_t>& symbols) const;

  // Rank and merged id of the pair (left, right), packed as rank << 32 | new_id; null when the
  // pair has no merge.
  const uint64_t* find_merge(int32_t left, int32_t right) const {
    return merges_.find(static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right));
  }

  // Token storage: blocks that never move, so views into them stay valid.
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t block_used_ = 0;
  size_t block_size_ = 0;

  StringIdMap vocab_;
  std::vector<std::string_view> tokens_;  // by id; data() == nullptr for ids not in the vocab
  U64Map merges_;
  std::vector<int32_t> char_ids_;  // code point -> id of the single-char token, or -1
  int32_t byte_ids_[256];          // byte -> id of "<0xXX>" when byte_fallback, else -1

  std::optional<std::string> unk_token_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;

  // Long words are cut, before merging, between two characters that no merge can ever join: a
  // merge joins two symbols, so only the pair (last char of its left part, first char of its
  // right part) can be crossed. Exact, and it makes split-free models (Gemma) linear-time.
  bool chunking_ = false;
  U64Map junctions_;  // keys: left code point << 21 | right code point
  std::vector<std::pair<int32_t, int32_t>> merge_pairs_;  // parts of each merge, during loading only
  bool merge_with_empty_part_ = false;

  uint64_t instance_id_ = 0;  // keys the per-thread word cache
};

}  // namespace lmx::text
