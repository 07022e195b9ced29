// Normalizer implementations and their construction from tokenizer.json.
#include "lmx/text/normalizer.h"

#include "lmx/text/tokenizer_byte_level.h"
#include "lmx/text/tokenizer_fields.h"
#include "lmx/text/tokenizer_pattern.h"
#include "lmx/text/tokenizer_unicode.h"

#include <vector>

namespace lmx::text {

namespace {

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text, bool& at_start) const override {
    if (at_start && content_.empty()) {
      size_t begin, end;
      bool first = true;
      pattern_.for_each_match(text, [&](size_t b, size_t e) {
        if (first) {
          begin = b;
          end = e;
          first = false;
        }
      });
      if (!first && begin == 0 && end > 0) at_start = false;
    }
    text = pattern_.replace_all(text, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text, bool&) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalizationForm form) : form_(form) {}
  void normalize(std::string& text, bool&) const override { text = normalize_unicode(text, form_); }

 private:
  NormalizationForm form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text, bool&) const override { text = to_lowercase(text); }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text, bool& at_start) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      size_t pos = 0;
      while (pos < end) {
        const size_t start = pos;
        if (!is_whitespace(next_code_point(text, pos))) {
          pos = start;
          break;
        }
      }
      begin = pos;
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t pos = start;
        if (!is_whitespace(next_code_point(text, pos))) break;
        end = start;
      }
    }
    if (begin > 0) at_start = false;
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Removes the characters for which `drop` holds.
template <typename Drop>
void filter_chars(std::string& text, bool& at_start, Drop drop) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  bool first = true;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = next_code_point(text, pos);
    if (drop(cp)) {
      if (first) at_start = false;
      continue;
    }
    first = false;
    out.append(text, start, pos - start);
  }
  text = std::move(out);
}

class StripAccentsNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text, bool& at_start) const override {
    filter_chars(text, at_start, [](char32_t cp) { return is_combining_mark(cp); });
  }
};

// SentencePiece's NMT normalization: drop some control characters, map other spaces to ' '.
class NmtNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text, bool& at_start) const override {
    filter_chars(text, at_start, [](char32_t c) {
      return (c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F ||
             c == 0x9F;
    });
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t start = pos;
      const char32_t c = next_code_point(text, pos);
      const bool space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 || (c >= 0x200B && c <= 0x200F) ||
                         c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF || c == 0xFFFD;
      if (space) out.push_back(' ');
      else out.append(text, start, pos - start);
    }
    text = std::move(out);
  }
};

class ByteLevelNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text, bool&) const override { text = byte_level_encode(text); }
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text, bool& at_start) const override {
    for (const auto& step : steps_) step->normalize(text, at_start);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> Normalizer::from_json(const nlohmann::json& json, const std::string& context) {
  if (json.is_null()) return nullptr;
  const std::string type = component_type(json, context);
  if (type == "Sequence") {
    const nlohmann::json& list = array_field(json, "normalizers", context);
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = from_json(list[i], fmt::format("{}.normalizers[{}]", context, i));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(Pattern::from_json(required_field(json, "pattern", context), context),
                                               string_field(json, "content", context));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(string_field(json, "prepend", context));
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalizationForm::kNfkd);
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(bool_field(json, "strip_left", context),
                                             bool_field(json, "strip_right", context));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "BertNormalizer" || type == "Bert" || type == "Precompiled") {
    throw Unsupported(fmt::format("tokenizer.json: {}: normalizer type '{}' is not supported by lmx", context, type));
  }
  throw FormatError(fmt::format("tokenizer.json: {}: unknown normalizer type '{}'", context, type));
}

}  // namespace lmx::text
