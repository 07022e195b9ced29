// The loaded components behind lmx::Tokenizer (internal to the text layer).
#pragma once

#include "lmx/text/bpe.h"
#include "lmx/text/decoder.h"
#include "lmx/text/normalizer.h"
#include "lmx/text/post_processor.h"
#include "lmx/text/pre_tokenizer.h"
#include "lmx/text/tokenizer_added_tokens.h"
#include "lmx/text/tokenizer_config.h"

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::text {

struct TokenizerImpl {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  TokenizerConfig config;
  std::vector<bool> special;  // by id: decode(skip_special_tokens) drops it
  // By id: the string the id decodes from (added tokens override the model vocab); data() is null
  // for ids that are neither.
  std::vector<std::string_view> token_strings;
  // By id: a "<0xXX>" token that the decoder's ByteFallback step joins with its neighbours (empty
  // when the decoder has no ByteFallback).
  std::vector<bool> byte_fallback_tokens;
  int32_t id_limit = 0;
  std::optional<int32_t> bos_id, eos_id;

  // Parses tokenizer.json text. `name` replaces "tokenizer.json" in error messages.
  static std::unique_ptr<TokenizerImpl> parse(std::string_view json_text, const std::string& name);

  // The string an id decodes from (added tokens first), or null for an unknown id. The view is
  // valid while the tokenizer lives.
  std::optional<std::string_view> token_string(int32_t id) const {
    if (id < 0 || id >= id_limit || token_strings[static_cast<size_t>(id)].data() == nullptr) return std::nullopt;
    return token_strings[static_cast<size_t>(id)];
  }
  void encode(std::string_view valid_utf8, bool add_special_tokens, std::vector<int32_t>& ids) const;
  // Decoder chain over the token strings of `ids`; throws InvalidArgument for unknown ids.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const;
};

}  // namespace lmx::text
