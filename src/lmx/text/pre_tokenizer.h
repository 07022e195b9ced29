// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split, ByteLevel, Metaspace, Digits,
// Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, FixedLength and
// Sequence, with HF tokenizers' split semantics.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::text {

// Normalized text cut into pieces (the future BPE words). Pieces are byte ranges of `text`, in
// order, never empty after a pre-tokenizer ran.
struct PreTokenizedText {
  struct Piece {
    size_t begin = 0;
    size_t end = 0;
    bool at_start = false;  // starts at the input's first character (see Normalizer::normalize)
  };
  std::string text;
  std::vector<Piece> pieces;

  std::string_view view(const Piece& p) const { return std::string_view(text).substr(p.begin, p.end - p.begin); }
};

// How the delimiters found by a pattern become pieces (HF SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedText& pieces) const = 0;

  // Builds the pre-tokenizer described by `json`; null JSON gives nullptr. Errors as Normalizer.
  static std::unique_ptr<PreTokenizer> from_json(const nlohmann::json& json, const std::string& context = "pre_tokenizer");
};

}  // namespace lmx::text
