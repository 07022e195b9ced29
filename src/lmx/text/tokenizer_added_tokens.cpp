// AddedVocabulary: HF-compatible added-token ids and matching.
#include "lmx/text/tokenizer_added_tokens.h"

#include "lmx/core/error.h"
#include "lmx/text/bpe.h"
#include "lmx/text/normalizer.h"
#include "lmx/text/tokenizer_fields.h"
#include "lmx/text/tokenizer_unicode.h"

#include <algorithm>

namespace lmx::text {

void AddedVocabulary::Trie::add(std::string_view pattern, int32_t id) {
  if (terminal.empty()) terminal.push_back(-1);
  if (pattern.empty()) return;
  uint32_t node = 0;
  for (const char c : pattern) {
    const uint64_t key = static_cast<uint64_t>(node) << 8 | static_cast<unsigned char>(c);
    const uint64_t* child = children.find(key);
    if (child) {
      node = static_cast<uint32_t>(*child);
    } else {
      const auto created = static_cast<uint32_t>(terminal.size());
      terminal.push_back(-1);
      children.insert(key, created);
      node = created;
    }
  }
  terminal[node] = id;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
}

void AddedVocabulary::load(const nlohmann::json& added_tokens, const BpeModel& model, const Normalizer* normalizer) {
  if (added_tokens.is_null()) return;
  LMX_REQUIRE(FormatError, added_tokens.is_array(), "tokenizer.json: added_tokens must be an array");
  int32_t next_id = static_cast<int32_t>(model.vocab_count());
  for (size_t i = 0; i < added_tokens.size(); ++i) {
    const nlohmann::json& j = added_tokens[i];
    const std::string context = fmt::format("added_tokens[{}]", i);
    LMX_REQUIRE(FormatError, j.is_object(), "tokenizer.json: {} must be an object", context);
    AddedToken token;
    token.content = string_field(j, "content", context);
    LMX_REQUIRE(FormatError, is_valid_utf8(token.content), "tokenizer.json: {}: content is not valid UTF-8", context);
    token.single_word = bool_field(j, "single_word", context, false);
    token.lstrip = bool_field(j, "lstrip", context, false);
    token.rstrip = bool_field(j, "rstrip", context, false);
    token.special = bool_field(j, "special", context, false);
    token.normalized = bool_field(j, "normalized", context, !token.special);
    if (token.content.empty()) continue;

    int32_t id;
    if (const auto it = id_of_content_.find(token.content); it != id_of_content_.end()) {
      id = it->second;
    } else if (const int32_t model_id = model.token_to_id(token.content); model_id >= 0) {
      id = model_id;
    } else {
      id = next_id++;
    }
    token.id = id;
    if (token.normalized && normalizer != nullptr) {
      std::string normed = token.content;
      bool at_start = true;
      normalizer->normalize(normed, at_start);
      if (normed != token.content) normalized_form_[id] = normed;
      else normalized_form_.erase(id);
    }
    id_of_content_[token.content] = id;
    if (token.special) special_contents_.insert(token.content);
    id_limit_ = std::max(id_limit_, id + 1);
    by_id_[id] = std::move(token);
  }
  rebuild_tries();
}

void AddedVocabulary::rebuild_tries() {
  raw_trie_ = Trie{};
  normalized_trie_ = Trie{};
  raw_trie_.terminal.push_back(-1);
  normalized_trie_.terminal.push_back(-1);
  // Sorted by id so that two tokens with the same pattern resolve deterministically (last wins).
  std::vector<int32_t> ids;
  for (const auto& [id, token] : by_id_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const int32_t id : ids) {
    const AddedToken& token = by_id_.at(id);
    if (token.normalized) {
      const auto it = normalized_form_.find(id);
      normalized_trie_.add(it != normalized_form_.end() ? std::string_view(it->second) : std::string_view(token.content), id);
    } else {
      raw_trie_.add(token.content, id);
    }
  }
}

namespace {

// Regex \w at the end / start of a string (HF's ends_with_word / starts_with_word).
bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t pos = start;
  return is_word_char(next_code_point(s, pos));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  return is_word_char(next_code_point(s, pos));
}

}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized_tokens, std::vector<TextSegment>& out) const {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, -1});
    return;
  }
  const Trie& trie = normalized_tokens ? normalized_trie_ : raw_trie_;
  if (trie.terminal.size() <= 1) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (!trie.first_byte[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // Longest pattern starting at i.
    uint32_t node = 0;
    int32_t found = -1;
    size_t found_end = 0;
    for (size_t j = i; j < n; ++j) {
      const uint64_t* child = trie.children.find(static_cast<uint64_t>(node) << 8 | static_cast<unsigned char>(text[j]));
      if (!child) break;
      node = static_cast<uint32_t>(*child);
      if (trie.terminal[node] >= 0) {
        found = trie.terminal[node];
        found_end = j + 1;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    size_t start = i, stop = found_end;
    i = found_end;  // the search resumes after the pattern, as the Aho-Corasick iterator does
    const AddedToken& token = by_id_.at(found);
    if (token.single_word) {
      const bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      const bool stop_space = stop == n || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      // Leftmost start of the whitespace run that ends at `start`, not before the last match.
      size_t new_start = start;
      while (new_start > 0) {
        size_t prev = new_start - 1;
        while (prev > 0 && (static_cast<unsigned char>(text[prev]) & 0xC0) == 0x80) --prev;
        size_t pos = prev;
        if (!is_whitespace(next_code_point(text, pos))) break;
        new_start = prev;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      size_t pos = stop;
      while (pos < n) {
        size_t next = pos;
        if (!is_whitespace(next_code_point(text, next))) break;
        pos = next;
      }
      stop = pos;
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, found});
    start_offset = stop;
  }
  if (start_offset != n) out.push_back({start_offset, n, -1});
}

int32_t AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = id_of_content_.find(std::string(content));
  return it == id_of_content_.end() ? -1 : it->second;
}

const std::string* AddedVocabulary::decode_string(int32_t id) const {
  const auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  const auto normed = normalized_form_.find(id);
  return normed != normalized_form_.end() ? &normed->second : &it->second.content;
}

}  // namespace lmx::text
