// Pre-tokenizer implementations and their construction from tokenizer.json.
#include "lmx/text/pre_tokenizer.h"

#include "lmx/text/tokenizer_byte_level.h"
#include "lmx/text/tokenizer_fields.h"
#include "lmx/text/tokenizer_pattern.h"
#include "lmx/text/tokenizer_unicode.h"

#include <algorithm>

namespace lmx::text {

namespace {

using Piece = PreTokenizedText::Piece;

// GPT-2's pre-tokenization regex (ByteLevel with use_regex).
constexpr std::string_view kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const nlohmann::json& json, const std::string& context) {
  const std::string b = string_field(json, "behavior", context);
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  throw FormatError(fmt::format("tokenizer.json: {}: unknown split behavior '{}'", context, b));
}

// HF NormalizedString::split: turns `matches` (covering a piece, in order) into the kept ranges.
void apply_behavior(const std::vector<PatternMatch>& matches, SplitBehavior behavior, std::vector<PatternMatch>& kept) {
  kept.clear();
  switch (behavior) {
    case SplitBehavior::kIsolated:
      kept = matches;
      break;
    case SplitBehavior::kRemoved:
      for (const auto& m : matches) {
        if (!m.is_match) kept.push_back(m);
      }
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const auto& m : matches) {
        if (m.is_match == previous_match && !kept.empty()) kept.back().end = m.end;
        else kept.push_back(m);
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& m : matches) {
        if (m.is_match && !previous_match && !kept.empty()) kept.back().end = m.end;
        else kept.push_back(m);
        previous_match = m.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t i = matches.size(); i-- > 0;) {
        const auto& m = matches[i];
        if (m.is_match && !previous_match && !kept.empty()) kept.back().begin = m.begin;
        else kept.push_back(m);
        previous_match = m.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
  }
}

// HF's Pattern for a char predicate: every matching character is its own match.
template <typename Predicate>
void char_matches(std::string_view text, Predicate is_delimiter, std::vector<PatternMatch>& out) {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t last = 0, pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = next_code_point(text, pos);
    if (is_delimiter(cp)) {
      if (last < start) out.push_back({last, start, false});
      out.push_back({start, pos, true});
      last = pos;
    }
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
}

// Replaces every piece by the non-empty kept ranges of its matches. `find` fills the matches of
// one piece's text.
template <typename Find>
void split_pieces(PreTokenizedText& pt, SplitBehavior behavior, bool invert, Find find) {
  std::vector<Piece> out;
  out.reserve(pt.pieces.size() * 2);
  std::vector<PatternMatch> matches, kept;
  for (const Piece& piece : pt.pieces) {
    find(pt.view(piece), matches);
    if (invert) {
      for (auto& m : matches) m.is_match = !m.is_match;
    }
    apply_behavior(matches, behavior, kept);
    for (const auto& k : kept) {
      if (k.end > k.begin) out.push_back({piece.begin + k.begin, piece.begin + k.end, piece.at_start && k.begin == 0});
    }
  }
  pt.pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(PreTokenizedText& pt) const override {
    split_pieces(pt, behavior_, invert_, [&](std::string_view t, std::vector<PatternMatch>& m) { pattern_.find_matches(t, m); });
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

template <typename Predicate>
class CharSplitPreTokenizer final : public PreTokenizer {
 public:
  CharSplitPreTokenizer(Predicate predicate, SplitBehavior behavior) : predicate_(predicate), behavior_(behavior) {}
  void pre_tokenize(PreTokenizedText& pt) const override {
    split_pieces(pt, behavior_, false, [&](std::string_view t, std::vector<PatternMatch>& m) { char_matches(t, predicate_, m); });
  }

 private:
  Predicate predicate_;
  SplitBehavior behavior_;
};

template <typename Predicate>
std::unique_ptr<PreTokenizer> char_split(Predicate predicate, SplitBehavior behavior) {
  return std::make_unique<CharSplitPreTokenizer<Predicate>>(predicate, behavior);
}

// HF Whitespace: keeps the matches of \w+|[^\w\s]+ and drops the rest.
class WhitespacePreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedText& pt) const override {
    split_pieces(pt, SplitBehavior::kRemoved, true, [](std::string_view t, std::vector<PatternMatch>& out) {
      out.clear();
      if (t.empty()) {
        out.push_back({0, 0, false});
        return;
      }
      size_t pos = 0, last = 0;
      while (pos < t.size()) {
        const size_t start = pos;
        const char32_t cp = next_code_point(t, pos);
        const bool word = is_word_char(cp);
        if (!word && is_whitespace(cp)) continue;
        // A run of word characters, or of characters that are neither word nor whitespace.
        size_t end = pos;
        while (end < t.size()) {
          size_t next = end;
          const char32_t c = next_code_point(t, next);
          const bool same = word ? is_word_char(c) : (!is_word_char(c) && !is_whitespace(c));
          if (!same) break;
          end = next;
        }
        if (last < start) out.push_back({last, start, false});
        out.push_back({start, end, true});
        last = pos = end;
      }
      if (last < t.size()) out.push_back({last, t.size(), false});
    });
  }
};

class FixedLengthPreTokenizer final : public PreTokenizer {
 public:
  explicit FixedLengthPreTokenizer(size_t length) : length_(length) {}
  void pre_tokenize(PreTokenizedText& pt) const override {
    std::vector<Piece> out;
    for (const Piece& piece : pt.pieces) {
      const std::string_view t = pt.view(piece);
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t start = pos;
        for (size_t n = 0; n < length_ && pos < t.size(); ++n) pos += utf8_length(static_cast<unsigned char>(t[pos]));
        out.push_back({piece.begin + start, piece.begin + pos, piece.at_start && start == 0});
      }
    }
    pt.pieces = std::move(out);
  }

 private:
  size_t length_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), regex_(use_regex ? Pattern::regex(kByteLevelRegex) : Pattern::literal("")),
        use_regex_(use_regex) {}
  void pre_tokenize(PreTokenizedText& pt) const override {
    PreTokenizedText out;
    out.text.reserve(pt.text.size() * 2 + pt.pieces.size());
    out.pieces.reserve(pt.pieces.size() * 2);
    std::string prefixed;
    std::vector<PatternMatch> matches;
    for (const Piece& piece : pt.pieces) {
      std::string_view t = pt.view(piece);
      if (add_prefix_space_ && !t.starts_with(' ')) {
        prefixed.resize(t.size() + 1);
        prefixed[0] = ' ';
        std::copy(t.begin(), t.end(), prefixed.begin() + 1);
        t = prefixed;
      }
      if (!use_regex_) {
        const size_t begin = out.text.size();
        append_byte_level(out.text, t);
        out.pieces.push_back({begin, out.text.size(), piece.at_start});
        continue;
      }
      regex_.find_matches(t, matches);
      for (const auto& m : matches) {
        if (m.end == m.begin) continue;
        const size_t begin = out.text.size();
        append_byte_level(out.text, t.substr(m.begin, m.end - m.begin));
        out.pieces.push_back({begin, out.text.size(), piece.at_start && m.begin == 0});
      }
    }
    pt = std::move(out);
  }

 private:
  bool add_prefix_space_;
  Pattern regex_;
  bool use_regex_;
};

enum class PrependScheme { kFirst, kNever, kAlways };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    size_t pos = 0;
    replacement_cp_ = next_code_point(replacement_, pos);
  }
  void pre_tokenize(PreTokenizedText& pt) const override {
    PreTokenizedText out;
    out.text.reserve(pt.text.size() * 2);
    for (const Piece& piece : pt.pieces) {
      const std::string_view t = pt.view(piece);
      const size_t begin = out.text.size();
      // Checked after spaces become the replacement, as HF does.
      const bool starts_with_replacement = t.starts_with(replacement_) || t.starts_with(' ');
      const bool prepend = !starts_with_replacement &&
                           (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start));
      if (prepend) out.text += replacement_;
      for (const char c : t) {
        if (c == ' ') out.text += replacement_;
        else out.text.push_back(c);
      }
      out.pieces.push_back({begin, out.text.size(), piece.at_start});
    }
    pt = std::move(out);
    if (split_) {
      const char32_t r = replacement_cp_;
      split_pieces(pt, SplitBehavior::kMergedWithNext, false,
                   [r](std::string_view t, std::vector<PatternMatch>& m) { char_matches(t, [r](char32_t c) { return c == r; }, m); });
    }
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_;
  PrependScheme scheme_;
  bool split_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(PreTokenizedText& pt) const override {
    for (const auto& step : steps_) step->pre_tokenize(pt);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

// BertPreTokenizer: split on whitespace (removed), then isolate punctuation.
class BertPreTokenizer final : public PreTokenizer {
 public:
  void pre_tokenize(PreTokenizedText& pt) const override {
    split_pieces(pt, SplitBehavior::kRemoved, false,
                 [](std::string_view t, std::vector<PatternMatch>& m) { char_matches(t, is_whitespace, m); });
    split_pieces(pt, SplitBehavior::kIsolated, false,
                 [](std::string_view t, std::vector<PatternMatch>& m) { char_matches(t, is_punctuation, m); });
  }
};

}  // namespace

std::unique_ptr<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& json, const std::string& context) {
  if (json.is_null()) return nullptr;
  const std::string type = component_type(json, context);
  if (type == "Sequence") {
    const nlohmann::json& list = array_field(json, "pretokenizers", context);
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = from_json(list[i], fmt::format("{}.pretokenizers[{}]", context, i));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(Pattern::from_json(required_field(json, "pattern", context), context),
                                               parse_behavior(json, context), bool_field(json, "invert", context, false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(bool_field(json, "add_prefix_space", context, true),
                                                   bool_field(json, "use_regex", context, true));
  }
  if (type == "Metaspace") {
    const std::string replacement = char_field(json, "replacement", context);
    const std::string scheme_name = string_field(json, "prepend_scheme", context, "always");
    PrependScheme scheme;
    if (scheme_name == "always") scheme = PrependScheme::kAlways;
    else if (scheme_name == "first") scheme = PrependScheme::kFirst;
    else if (scheme_name == "never") scheme = PrependScheme::kNever;
    else throw FormatError(fmt::format("tokenizer.json: {}: unknown prepend_scheme '{}'", context, scheme_name));
    // Older files: add_prefix_space false means never (and must agree with prepend_scheme).
    const auto legacy = json.find("add_prefix_space");
    if (legacy != json.end() && legacy->is_boolean() && !legacy->get<bool>()) {
      LMX_REQUIRE(FormatError, scheme == PrependScheme::kNever || json.find("prepend_scheme") == json.end(),
                           "tokenizer.json: {}: add_prefix_space does not match declared prepend_scheme", context);
      scheme = PrependScheme::kNever;
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, bool_field(json, "split", context, true));
  }
  if (type == "Digits") {
    const bool individual = bool_field(json, "individual_digits", context, false);
    return char_split(is_numeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") {
    const SplitBehavior behavior = json.contains("behavior") ? parse_behavior(json, context) : SplitBehavior::kIsolated;
    return char_split(is_punctuation, behavior);
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return char_split(is_whitespace, SplitBehavior::kRemoved);
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "CharDelimiterSplit") {
    const std::string delimiter = char_field(json, "delimiter", context);
    size_t pos = 0;
    const char32_t d = next_code_point(delimiter, pos);
    return char_split([d](char32_t c) { return c == d; }, SplitBehavior::kRemoved);
  }
  if (type == "FixedLength") {
    return std::make_unique<FixedLengthPreTokenizer>(
        static_cast<size_t>(int_field(json, "length", context, 1, int64_t{1} << 30, 5)));
  }
  if (type == "UnicodeScripts") {
    throw Unsupported(fmt::format("tokenizer.json: {}: pre-tokenizer type '{}' is not supported by lmx", context, type));
  }
  throw FormatError(fmt::format("tokenizer.json: {}: unknown pre-tokenizer type '{}'", context, type));
}

}  // namespace lmx::text
