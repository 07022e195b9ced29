// Post-processor implementations and their construction from tokenizer.json.
#include "lmx/text/post_processor.h"

#include "lmx/text/tokenizer_fields.h"

#include <map>

namespace lmx::text {

namespace {

constexpr int64_t kMaxId = (int64_t{1} << 31) - 1;

// One element of a template: the input sequence ($A / $B) or a special token's ids.
struct TemplatePiece {
  bool is_sequence = false;
  bool is_sequence_a = true;
  std::string special_token;  // key into the special-token table
};

TemplatePiece parse_piece_string(const std::string& text, const std::string& context) {
  // HF Piece::try_from: "$A", "$B", "$", "$<type id>", with an optional ":<type id>" suffix.
  std::string id = text.substr(0, text.find(':'));
  TemplatePiece piece;
  if (!id.empty() && id[0] == '$') {
    const std::string rest = id.substr(1);
    piece.is_sequence = true;
    if (rest == "B" || rest == "b") piece.is_sequence_a = false;
    else if (!(rest.empty() || rest == "A" || rest == "a" || rest.find_first_not_of("0123456789") == std::string::npos)) {
      throw FormatError(fmt::format("tokenizer.json: {}: cannot build a template piece from \"{}\"", context, text));
    }
    return piece;
  }
  piece.special_token = id;
  return piece;
}

std::vector<TemplatePiece> parse_template(const nlohmann::json& json, const std::string& context) {
  std::vector<TemplatePiece> pieces;
  if (json.is_string()) {
    // The builder's string form: pieces separated by spaces.
    const std::string s = json.get<std::string>();
    size_t start = 0;
    while (start <= s.size()) {
      const size_t space = s.find(' ', start);
      const std::string part = s.substr(start, space == std::string::npos ? std::string::npos : space - start);
      pieces.push_back(parse_piece_string(part, context));
      if (space == std::string::npos) break;
      start = space + 1;
    }
    return pieces;
  }
  LMX_REQUIRE(FormatError, json.is_array(), "tokenizer.json: {} must be an array of template pieces", context);
  for (size_t i = 0; i < json.size(); ++i) {
    const nlohmann::json& p = json[i];
    const std::string where = fmt::format("{}[{}]", context, i);
    if (p.is_string()) {
      pieces.push_back(parse_piece_string(p.get<std::string>(), where));
      continue;
    }
    LMX_REQUIRE(FormatError, p.is_object() && p.size() == 1, "tokenizer.json: {} must be {{\"Sequence\": ...}} or {{\"SpecialToken\": ...}}",
                         where);
    const auto member = p.begin();
    const std::string kind = member.key();
    const nlohmann::json& body = member.value();
    TemplatePiece piece;
    if (kind == "Sequence") {
      const std::string id = string_field(body, "id", where);
      LMX_REQUIRE(FormatError, id == "A" || id == "B", "tokenizer.json: {}: sequence id must be A or B, got '{}'", where, id);
      piece.is_sequence = true;
      piece.is_sequence_a = id == "A";
    } else if (kind == "SpecialToken") {
      piece.special_token = string_field(body, "id", where);
    } else {
      throw FormatError(fmt::format("tokenizer.json: {}: unknown template piece '{}'", where, kind));
    }
    pieces.push_back(std::move(piece));
  }
  return pieces;
}

class TemplateProcessor final : public PostProcessor {
 public:
  TemplateProcessor(std::vector<TemplatePiece> single, std::map<std::string, std::vector<int32_t>> special)
      : single_(std::move(single)), special_(std::move(special)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + 4);
    for (const TemplatePiece& piece : single_) {
      if (piece.is_sequence) {
        if (piece.is_sequence_a) out.insert(out.end(), ids.begin(), ids.end());
      } else if (add_special_tokens) {
        const auto& special = special_.at(piece.special_token);
        out.insert(out.end(), special.begin(), special.end());
      }
    }
    ids = std::move(out);
  }

 private:
  std::vector<TemplatePiece> single_;
  std::map<std::string, std::vector<int32_t>> special_;
};

// BertProcessing / RobertaProcessing for one sequence: cls + ids + sep.
class ClsSepProcessor final : public PostProcessor {
 public:
  ClsSepProcessor(int32_t cls, int32_t sep) : cls_(cls), sep_(sep) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  int32_t cls_, sep_;
};

class IdentityProcessor final : public PostProcessor {
 public:
  void process(std::vector<int32_t>&, bool) const override {}
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->process(ids, add_special_tokens);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// A ["token", id] pair of BertProcessing / RobertaProcessing.
int32_t token_pair_id(const nlohmann::json& json, std::string_view name, const std::string& context) {
  const nlohmann::json& pair = required_field(json, name, context);
  LMX_REQUIRE(FormatError, pair.is_array() && pair.size() == 2 && pair[0].is_string() && pair[1].is_number_integer(),
                       "tokenizer.json: {}: field '{}' must be [token, id]", context, name);
  const auto id = pair[1].get<int64_t>();
  LMX_REQUIRE(FormatError, id >= 0 && id <= kMaxId, "tokenizer.json: {}: field '{}' has a bad id {}", context, name, id);
  return static_cast<int32_t>(id);
}

}  // namespace

std::unique_ptr<PostProcessor> PostProcessor::from_json(const nlohmann::json& json, const std::string& context) {
  if (json.is_null()) return nullptr;
  const std::string type = component_type(json, context);
  if (type == "Sequence") {
    const nlohmann::json& list = array_field(json, "processors", context);
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (size_t i = 0; i < list.size(); ++i) {
      auto step = from_json(list[i], fmt::format("{}.processors[{}]", context, i));
      if (step) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  if (type == "TemplateProcessing") {
    std::map<std::string, std::vector<int32_t>> special;
    const auto it = json.find("special_tokens");
    if (it != json.end() && !it->is_null()) {
      LMX_REQUIRE(FormatError, it->is_object(), "tokenizer.json: {}.special_tokens must be an object", context);
      for (const auto& [name, token] : it->items()) {
        const std::string where = fmt::format("{}.special_tokens.{}", context, name);
        const nlohmann::json& ids = array_field(token, "ids", where);
        const auto tokens = token.find("tokens");
        LMX_REQUIRE(FormatError, tokens == token.end() || (tokens->is_array() && tokens->size() == ids.size()),
                             "tokenizer.json: {}: ids and tokens must be of the same length", where);
        std::vector<int32_t> values;
        for (const auto& id : ids) {
          LMX_REQUIRE(FormatError, id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= kMaxId,
                               "tokenizer.json: {}: bad id {}", where, id.dump());
          values.push_back(static_cast<int32_t>(id.get<int64_t>()));
        }
        special[name] = std::move(values);
      }
    }
    auto single = parse_template(required_field(json, "single", context), context + ".single");
    for (const auto& piece : single) {
      LMX_REQUIRE(FormatError, piece.is_sequence || special.count(piece.special_token) > 0,
                           "tokenizer.json: {}: template uses special token '{}' missing from special_tokens", context,
                           piece.special_token);
    }
    return std::make_unique<TemplateProcessor>(std::move(single), std::move(special));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    return std::make_unique<ClsSepProcessor>(token_pair_id(json, "cls", context), token_pair_id(json, "sep", context));
  }
  if (type == "ByteLevel") return std::make_unique<IdentityProcessor>();
  throw FormatError(fmt::format("tokenizer.json: {}: unknown post-processor type '{}'", context, type));
}

}  // namespace lmx::text
