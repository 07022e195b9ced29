// Decoder implementations and their construction from tokenizer.json.
#include "lmx/text/decoder.h"

#include "lmx/text/tokenizer_byte_level.h"
#include "lmx/text/tokenizer_fields.h"
#include "lmx/text/tokenizer_pattern.h"
#include "lmx/text/tokenizer_unicode.h"

namespace lmx::text {

namespace {

const std::string kReplacementUtf8 = "\xEF\xBF\xBD";

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) t = pattern_.replace_all(t, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}


class ByteFallbackDecoder final : public Decoder {
 public:
  bool has_byte_fallback() const override { return true; }
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string bytes;
    const auto flush = [&]() {
      if (bytes.empty()) return;
      if (is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < bytes.size(); ++i) out.push_back(kReplacementUtf8);  // one per byte, as HF
      }
      bytes.clear();
    };
    for (auto& t : tokens) {
      const int b = fallback_byte(t);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const auto& t : tokens) joined += t;
    tokens.assign(1, std::move(joined));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<size_t> offsets;  // byte offset of each character, plus the end
    for (auto& t : tokens) {
      offsets.clear();
      size_t pos = 0;
      std::vector<char32_t> chars;
      while (pos < t.size()) {
        offsets.push_back(pos);
        chars.push_back(next_code_point(t, pos));
      }
      offsets.push_back(t.size());
      size_t start_cut = 0;
      for (size_t i = 0; i < start_ && i < chars.size(); ++i) {
        if (chars[i] != content_) break;
        start_cut = i + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index] != content_) break;
        stop_cut = index;
      }
      if (start_cut >= stop_cut) t.clear();
      else t = t.substr(offsets[start_cut], offsets[stop_cut] - offsets[start_cut]);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      const size_t mark = bytes.size();
      size_t pos = 0;
      bool all_mapped = true;
      while (pos < t.size()) {
        const int b = byte_level_byte(next_code_point(t, pos));
        if (b < 0) {
          all_mapped = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
      }
      if (!all_mapped) {
        bytes.resize(mark);
        bytes += t;  // a token outside the alphabet contributes its own bytes
      }
    }
    tokens.assign(1, is_valid_utf8(bytes) ? std::move(bytes) : to_valid_utf8(bytes));
  }
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(char32_t replacement, bool strip_first) : replacement_(replacement), strip_first_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& t = tokens[i];
      std::string out;
      out.reserve(t.size());
      size_t pos = 0;
      while (pos < t.size()) {
        const size_t start = pos;
        if (next_code_point(t, pos) != replacement_) {
          out.append(t, start, pos - start);
        } else if (i != 0 || !strip_first_) {  // HF drops every replacement in the first token
          out.push_back(' ');
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  char32_t replacement_;
  bool strip_first_;
};

class BpeSuffixDecoder final : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    if (suffix_.empty()) return;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string replacement = i + 1 == tokens.size() ? "" : " ";
      std::string out;
      size_t pos = 0;
      const std::string& t = tokens[i];
      while (true) {
        const size_t found = t.find(suffix_, pos);
        if (found == std::string::npos) break;
        out.append(t, pos, found - pos).append(replacement);
        pos = found + suffix_.size();
      }
      out.append(t, pos, std::string::npos);
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  bool has_byte_fallback() const override {
    for (const auto& step : steps_) {
      if (step->has_byte_fallback()) return true;
    }
    return false;
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

char32_t single_char(const std::string& s) {
  size_t pos = 0;
  return next_code_point(s, pos);
}

}  // namespace

int Decoder::fallback_byte(std::string_view token) {
  // u8::from_str_radix on the two characters after "0x", which also accepts "+X".
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return -1;
  if (token[3] == '+') return hex_digit(token[4]);
  const int hi = hex_digit(token[3]), lo = hex_digit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::unique_ptr<Decoder> Decoder::from_json(const nlohmann::json& json, const std::string& context) {
  if (json.is_null()) return nullptr;
  const std::string type = component_type(json, context);
  if (type == "Sequence") {
    const nlohmann::json& list = array_field(json, "decoders", context);
    std::vector<std::unique_ptr<Decoder>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = from_json(list[i], fmt::format("{}.decoders[{}]", context, i));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(Pattern::from_json(required_field(json, "pattern", context), context),
                                            string_field(json, "content", context));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(single_char(char_field(json, "content", context)),
                                          static_cast<size_t>(int_field(json, "start", context, 0, int64_t{1} << 30)),
                                          static_cast<size_t>(int_field(json, "stop", context, 0, int64_t{1} << 30)));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    const std::string replacement = char_field(json, "replacement", context);
    std::string scheme = string_field(json, "prepend_scheme", context, "always");
    LMX_REQUIRE(FormatError, scheme == "always" || scheme == "first" || scheme == "never",
                         "tokenizer.json: {}: unknown prepend_scheme '{}'", context, scheme);
    const auto legacy = json.find("add_prefix_space");
    if (legacy != json.end() && legacy->is_boolean() && !legacy->get<bool>()) scheme = "never";
    return std::make_unique<MetaspaceDecoder>(single_char(replacement), scheme != "never");
  }
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(string_field(json, "suffix", context, "</w>"));
  if (type == "WordPiece" || type == "CTC") {
    throw Unsupported(fmt::format("tokenizer.json: {}: decoder type '{}' is not supported by lmx", context, type));
  }
  throw FormatError(fmt::format("tokenizer.json: {}: unknown decoder type '{}'", context, type));
}

}  // namespace lmx::text
