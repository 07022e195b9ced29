// lmx::ConstraintVocabulary: the vocabulary as the JSON automata see it — each token's text alone (special
// tokens excluded) — indexed so that a mask pass skips most checks: tokens are grouped by their first byte
// (a group whose first byte the automaton refuses is skipped whole), and tokens of plain string content (no
// '"', '\', control bytes) are allowed without a check while the automaton is inside a string.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace lmx {

class Tokenizer;

class ConstraintVocabulary {
 public:
  ConstraintVocabulary() = default;
  // The texts of ids [0, vocab_size) through `tokenizer` (ids it cannot decode and special tokens: none).
  ConstraintVocabulary(const Tokenizer& tokenizer, int64_t vocab_size);
  // From texts directly (empty: never allowed); for tests.
  explicit ConstraintVocabulary(std::vector<std::string> texts);

  bool empty() const { return texts_.empty(); }
  const std::string& text(int32_t id) const { return texts_.at(static_cast<size_t>(id)); }

  // Calls `allow(id)` for every token `automaton.allows(text)` accepts — the same set as checking each text,
  // found with fewer checks. The automaton needs allows(string_view) and in_string().
  template <class Automaton>
  void for_each_allowed(const Automaton& automaton, const std::function<void(int32_t)>& allow) const {
    const bool in_string = automaton.in_string();
    for (int b = 0; b < 256; ++b) {
      const std::vector<int32_t>& group = by_first_byte_[static_cast<size_t>(b)];
      if (group.empty()) continue;
      const char first = static_cast<char>(b);
      if (!automaton.allows(std::string_view(&first, 1))) continue;
      for (int32_t id : group)
        if ((in_string && plain_[static_cast<size_t>(id)]) ||
            automaton.allows(texts_[static_cast<size_t>(id)]))
          allow(id);
    }
  }

 private:
  void index();
  std::vector<std::string> texts_;
  std::vector<bool> plain_;
  std::array<std::vector<int32_t>, 256> by_first_byte_;
};

}  // namespace lmx
