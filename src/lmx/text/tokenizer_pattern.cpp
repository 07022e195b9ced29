// PCRE2-backed regexes with Oniguruma pattern translation, and HF's pattern match iteration.
#include "lmx/text/tokenizer_pattern.h"

#include "lmx/core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <nlohmann/json.hpp>

#include <cstring>

namespace lmx::text {

namespace {

// Oniguruma's \s for UTF-8 text: the Unicode White_Space property, as class members.
constexpr std::string_view kSpaceClassMembers =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";
constexpr std::string_view kHexClassMembers = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Per-thread match state shared by all regexes: one match-data block and a JIT stack large enough
// for long runs of repeated characters.
struct ThreadMatchState {
  pcre2_match_data* match_data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ThreadMatchState() {
    match_data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    jit_stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && jit_stack) pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
    if (context) pcre2_match_context_free(context);
    if (match_data) pcre2_match_data_free(match_data);
  }
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

std::string translate_onig_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  int class_depth = 0;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      const bool in_class = class_depth > 0;
      switch (e) {
        case 's':
          if (in_class) out += kSpaceClassMembers;
          else out.append("[").append(kSpaceClassMembers).append("]");
          continue;
        case 'S':
          if (in_class) out += "\\S";  // PCRE2's UCP \S; differs from White_Space only on U+180E
          else out.append("[^").append(kSpaceClassMembers).append("]");
          continue;
        case 'h':
          if (in_class) out += kHexClassMembers;
          else out.append("[").append(kHexClassMembers).append("]");
          continue;
        case 'H':
          if (!in_class) {
            out.append("[^").append(kHexClassMembers).append("]");
            continue;
          }
          break;
        default:
          break;
      }
      out.push_back('\\');
      out.push_back(e);
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out.push_back(c);
  }
  return out;
}

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern) : pattern_(pattern), code_(std::make_unique<Code>()) {
  const std::string translated = translate_onig_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  LMX_REQUIRE(FormatError, code_->code != nullptr, "invalid regex '{}': {} (at offset {})", pattern_,
                       pcre2_message(error), offset);
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

bool Regex::search(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const {
  ThreadMatchState& state = thread_match_state();
  LMX_REQUIRE(InvalidArgument, state.match_data != nullptr, "out of memory for regex matching");
  const auto* data = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc;
  if (code_->jit) {
    rc = pcre2_jit_match(code_->code, data, subject.size(), start, 0, state.match_data, state.context);
  } else {
    rc = pcre2_match(code_->code, data, subject.size(), start, PCRE2_NO_UTF_CHECK, state.match_data,
                     state.context);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  LMX_REQUIRE(InvalidArgument, rc >= 0, "regex '{}' failed on the input: {}", pattern_, pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
  match_begin = ovector[0];
  match_end = ovector[1];
  // \K can produce a match ending before it starts; treat it as empty at the start.
  if (match_end < match_begin) match_end = match_begin;
  return true;
}

Pattern Pattern::literal(std::string text) {
  Pattern p;
  p.literal_ = std::move(text);
  return p;
}

Pattern Pattern::regex(std::string_view onig_pattern) {
  Pattern p;
  p.regex_ = std::make_shared<const Regex>(onig_pattern);
  return p;
}

Pattern Pattern::from_json(const nlohmann::json& json, std::string_view context) {
  LMX_REQUIRE(FormatError, json.is_object() && json.size() == 1, "{}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}",
                       context);
  const auto member = json.begin();
  const std::string kind = member.key();
  const nlohmann::json& value = member.value();
  LMX_REQUIRE(FormatError, value.is_string(), "{}: pattern {} must be a string", context, kind);
  if (kind == "String") return literal(value.get<std::string>());
  if (kind == "Regex") {
    try {
      return regex(value.get<std::string>());
    } catch (const FormatError& e) {
      throw FormatError(fmt::format("{}: {}", context, e.what()));
    }
  }
  throw FormatError(fmt::format("{}: unknown pattern kind '{}' (expected String or Regex)", context, kind));
}

bool Pattern::search(std::string_view text, size_t start, size_t& match_begin, size_t& match_end) const {
  if (regex_) return regex_->search(text, start, match_begin, match_end);
  if (start > text.size()) return false;
  const size_t found = text.find(literal_, start);
  if (found == std::string_view::npos) return false;
  match_begin = found;
  match_end = found + literal_.size();
  return true;
}

void Pattern::find_matches(std::string_view text, std::vector<PatternMatch>& out) const {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  for_each_match(text, [&](size_t begin, size_t end) {
    if (prev != begin) out.push_back({prev, begin, false});
    out.push_back({begin, end, true});
    prev = end;
  });
  if (prev != text.size()) out.push_back({prev, text.size(), false});
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  if (text.empty()) return {};  // HF's find_matches reports no match in an empty string
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for_each_match(text, [&](size_t begin, size_t end) {
    out.append(text.data() + prev, begin - prev);
    out.append(content);
    prev = end;
  });
  out.append(text.data() + prev, text.size() - prev);
  return out;
}

}  // namespace lmx::text
