// Patterns of tokenizer.json components ({"String": s} or {"Regex": r}): Oniguruma-syntax regexes
// run through PCRE2, and HF tokenizers' find_matches / find_iter semantics on top of them.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::text {

// A half-open byte range of a UTF-8 string and whether it is a match of the pattern.
struct PatternMatch {
  size_t begin = 0;
  size_t end = 0;
  bool is_match = false;
};

// A compiled regex. Patterns use HF tokenizers' (Oniguruma, Ruby syntax) dialect and are
// translated for PCRE2 (UTF + UCP): \s/\S become the Unicode White_Space class, \h/\H hex digits.
// Compiled (and JIT-compiled) once; matching is thread-safe.
class Regex {
 public:
  // Throws FormatError naming the pattern and PCRE2's message when it does not compile.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  const std::string& pattern() const { return pattern_; }

  // First match starting at or after byte `start` of valid UTF-8 `subject` (lookbehind sees the
  // whole subject). Returns false when there is none. Throws InvalidArgument when PCRE2 gives up
  // (resource limits on pathological input).
  bool search(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const;

 private:
  std::string pattern_;
  struct Code;
  std::unique_ptr<Code> code_;
};

// Translates an Oniguruma pattern to PCRE2 syntax (exposed for tests).
std::string translate_onig_pattern(std::string_view pattern);

// HF's SplitPattern / ReplacePattern. A String pattern matches its literal text (HF compiles it as
// an escaped regex, so an empty string matches the empty string at every position).
class Pattern {
 public:
  static Pattern literal(std::string text);
  static Pattern regex(std::string_view onig_pattern);
  // {"String": "..."} or {"Regex": "..."}; throws FormatError naming `context` otherwise.
  static Pattern from_json(const nlohmann::json& json, std::string_view context);

  // Successive non-overlapping matches (start, end) as Oniguruma's find_iter yields them: an empty
  // match right where the previous match ended is skipped by advancing one character.
  template <typename F>
  void for_each_match(std::string_view text, F&& on_match) const;

  // HF Pattern::find_matches: ranges covering `text` in order, alternating non-matches and
  // matches (empty matches included); an empty text gives one empty non-match.
  void find_matches(std::string_view text, std::vector<PatternMatch>& out) const;

  // Every match replaced by `content` (HF NormalizedString::replace and the Replace decoder).
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  bool search(std::string_view text, size_t start, size_t& match_begin, size_t& match_end) const;

  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null for a literal
};

template <typename F>
void Pattern::for_each_match(std::string_view text, F&& on_match) const {
  size_t pos = 0;
  bool has_last_end = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    size_t begin, end;
    if (!search(text, pos, begin, end)) return;
    if (begin == end && has_last_end && last_end == end) {
      if (pos >= text.size()) return;
      const auto b0 = static_cast<unsigned char>(text[pos]);
      pos += b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
      continue;
    }
    pos = end;
    has_last_end = true;
    last_end = end;
    on_match(begin, end);
  }
}

}  // namespace lmx::text
