// Added tokens of tokenizer.json ("added_tokens"): id assignment and the leftmost-longest matching
// of their text in the input, before the model, as HF tokenizers' AddedVocabulary does.
#pragma once

#include "lmx/text/tokenizer_hash.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lmx::text {

class BpeModel;
class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

// A byte range of a text and the added token it is (id >= 0), or -1 for plain text.
struct TextSegment {
  size_t begin = 0;
  size_t end = 0;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // Adds the tokens of the "added_tokens" array in order. As HF's add_tokens: a token whose text
  // is already an added token or in the model vocab takes that id, any other takes the next id
  // from the model's vocab size up (the ids written in the file are not used). Tokens with
  // normalized=true match their text after `normalizer`.
  void load(const nlohmann::json& added_tokens, const BpeModel& model, const Normalizer* normalizer);

  // Splits `text` at the added tokens found in it (the normalized or the non-normalized ones):
  // leftmost-longest, non-overlapping, with single_word/lstrip/rstrip applied. The segments
  // cover `text` in order; an empty text gives one empty plain segment.
  void split(std::string_view text, bool normalized_tokens, std::vector<TextSegment>& out) const;

  // The id of an added token's text, or -1.
  int32_t token_to_id(std::string_view content) const;
  // The string an added token decodes from (its normalized form when it has one), or null when
  // `id` is not an added token.
  const std::string* decode_string(int32_t id) const;
  bool is_special_content(std::string_view content) const { return special_contents_.count(std::string(content)) > 0; }
  const std::unordered_set<std::string>& special_contents() const { return special_contents_; }
  // One past the largest added id (0 when there is none).
  int32_t id_limit() const { return id_limit_; }
  const std::unordered_map<int32_t, AddedToken>& tokens_by_id() const { return by_id_; }

 private:
  // A byte trie over the token patterns; node 0 is the root.
  struct Trie {
    U64Map children;               // node << 8 | byte -> child node
    std::vector<int32_t> terminal;  // node -> token id ending there, or -1
    bool first_byte[256] = {};
    void add(std::string_view pattern, int32_t id);
  };
  void rebuild_tries();

  std::unordered_map<std::string, int32_t> id_of_content_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<int32_t, std::string> normalized_form_;  // only where it differs from content
  std::unordered_set<std::string> special_contents_;
  Trie raw_trie_;         // tokens with normalized=false, matched on the input
  Trie normalized_trie_;  // tokens with normalized=true, matched on normalized text
  int32_t id_limit_ = 0;
};

}  // namespace lmx::text
