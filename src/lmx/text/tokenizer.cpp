// lmx::Tokenizer: loading tokenizer.json and running the encode/decode pipelines.
#include "lmx/text/tokenizer.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"
#include "lmx/io/input_file.h"
#include "lmx/io/json_input.h"
#include "lmx/text/tokenizer_impl.h"
#include "lmx/text/tokenizer_json.h"
#include "lmx/text/tokenizer_unicode.h"

#include <nlohmann/json.hpp>

namespace lmx {

namespace text {

namespace {

constexpr std::string_view kDefaultName = "tokenizer.json";

nlohmann::json parse_component(std::string_view raw, const std::string& name, std::string_view field) {
  if (raw.empty()) return nullptr;
  return parse_json(raw, fmt::format("{} '{}'", name, field));
}

// Component errors say "tokenizer.json: ..."; name the actual file instead.
std::string rename_file(const std::string& message, const std::string& name) {
  if (name != kDefaultName && message.starts_with(kDefaultName)) return name + message.substr(kDefaultName.size());
  return message;
}

}  // namespace

std::unique_ptr<TokenizerImpl> TokenizerImpl::parse(std::string_view json_text, const std::string& name) {
  auto impl = std::make_unique<TokenizerImpl>();
  try {
    JsonScanner json(json_text, name);
    LMX_REQUIRE(FormatError, json.peek() == '{', "{}: not a JSON object", name);
    std::string_view raw_normalizer, raw_pre_tokenizer, raw_post_processor, raw_decoder, raw_added_tokens;
    std::string scratch;
    std::string_view key;
    json.begin_object();
    while (json.next_member(key, scratch)) {
      if (key == "model") {
        LMX_REQUIRE(FormatError, json.peek() == '{', "{}: 'model' must be an object", name);
        impl->model = BpeModel::parse(json);
      } else if (key == "version") {
        std::string version_scratch;
        LMX_REQUIRE(FormatError, json.peek() == '"', "{}: 'version' must be a string", name);
        const std::string_view version = json.read_string(version_scratch);
        LMX_REQUIRE(FormatError, version == "1.0", "{}: unknown tokenizer version '{}'", name, version);
      } else if (key == "normalizer") {
        raw_normalizer = json.skip_value();
      } else if (key == "pre_tokenizer") {
        raw_pre_tokenizer = json.skip_value();
      } else if (key == "post_processor") {
        raw_post_processor = json.skip_value();
      } else if (key == "decoder") {
        raw_decoder = json.skip_value();
      } else if (key == "added_tokens") {
        raw_added_tokens = json.skip_value();
      } else {
        json.skip_value();  // truncation, padding and unknown fields
      }
    }
    json.expect_end();
    LMX_REQUIRE(FormatError, impl->model != nullptr, "{}: missing 'model'", name);

    impl->normalizer = Normalizer::from_json(parse_component(raw_normalizer, name, "normalizer"));
    impl->pre_tokenizer = PreTokenizer::from_json(parse_component(raw_pre_tokenizer, name, "pre_tokenizer"));
    impl->post_processor = PostProcessor::from_json(parse_component(raw_post_processor, name, "post_processor"));
    impl->decoder = Decoder::from_json(parse_component(raw_decoder, name, "decoder"));
    impl->added.load(parse_component(raw_added_tokens, name, "added_tokens"), *impl->model, impl->normalizer.get());
  } catch (const FormatError& e) {
    throw FormatError(rename_file(e.what(), name));
  } catch (const Unsupported& e) {
    throw Unsupported(rename_file(e.what(), name));
  }

  impl->id_limit = std::max(impl->model->id_limit(), impl->added.id_limit());
  impl->token_strings.assign(static_cast<size_t>(impl->id_limit), std::string_view());
  for (int32_t id = 0; id < impl->model->id_limit(); ++id) {
    if (const auto s = impl->model->id_to_token(id)) impl->token_strings[static_cast<size_t>(id)] = *s;
  }
  for (const auto& [id, token] : impl->added.tokens_by_id()) {
    const std::string* s = impl->added.decode_string(id);
    impl->token_strings[static_cast<size_t>(id)] = s->empty() ? std::string_view("", 0) : std::string_view(*s);
  }
  if (impl->decoder && impl->decoder->has_byte_fallback()) {
    impl->byte_fallback_tokens.assign(static_cast<size_t>(impl->id_limit), false);
    for (size_t id = 0; id < impl->token_strings.size(); ++id) {
      const std::string_view s = impl->token_strings[id];
      impl->byte_fallback_tokens[id] = s.data() != nullptr && Decoder::fallback_byte(s) >= 0;
    }
  }
  impl->special.assign(static_cast<size_t>(impl->id_limit), false);
  for (const auto& [id, token] : impl->added.tokens_by_id()) {
    impl->special[id] = impl->added.is_special_content(*impl->added.decode_string(id));
  }
  for (const std::string& content : impl->added.special_contents()) {
    const int32_t id = impl->model->token_to_id(content);
    if (id >= 0 && impl->added.decode_string(id) == nullptr) impl->special[id] = true;
  }
  return impl;
}

void TokenizerImpl::encode(std::string_view text, bool add_special_tokens, std::vector<int32_t>& ids) const {
  std::vector<TextSegment> segments, inner;
  added.split(text, false, segments);
  for (const TextSegment& segment : segments) {
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    if (segment.end <= segment.begin) continue;
    std::string normalized(text.substr(segment.begin, segment.end - segment.begin));
    bool at_start = segment.begin == 0;
    if (normalizer) normalizer->normalize(normalized, at_start);
    if (normalized.empty()) continue;
    added.split(normalized, true, inner);
    const bool whole = inner.size() == 1 && inner[0].id < 0;
    for (const TextSegment& part : inner) {
      if (part.id >= 0) {
        ids.push_back(part.id);
        continue;
      }
      if (part.end <= part.begin) continue;
      PreTokenizedText pieces;
      pieces.text = whole ? std::move(normalized) : normalized.substr(part.begin, part.end - part.begin);
      pieces.pieces.push_back({0, pieces.text.size(), at_start && part.begin == 0});
      if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
      for (const auto& piece : pieces.pieces) model->tokenize(pieces.view(piece), ids);
    }
  }
  if (post_processor) post_processor->process(ids, add_special_tokens);
}

std::string TokenizerImpl::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    const auto s = token_string(id);
    LMX_REQUIRE(InvalidArgument, s.has_value(), "decode: token id {} is not in the vocabulary (ids go up to {})", id,
                             id_limit - 1);
    if (skip_special_tokens && special[id]) continue;
    tokens.emplace_back(*s);
  }
  if (decoder) decoder->decode_chain(tokens);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!decoder && i > 0) out.push_back(' ');
    out += tokens[i];
  }
  return out;
}

}  // namespace text

Tokenizer Tokenizer::load(const std::string& model_dir) {
  const std::string path = join_path(model_dir, "tokenizer.json");
  const std::string json_text = read_input_file(path, InputKind::kTokenizer);
  std::unique_ptr<text::TokenizerImpl> impl = text::TokenizerImpl::parse(json_text, path);
  impl->config = text::TokenizerConfig::load(model_dir);
  const auto id_of = [&](const std::optional<std::string>& token) -> std::optional<int32_t> {
    if (!token) return std::nullopt;
    const int32_t id = impl->added.token_to_id(*token) >= 0 ? impl->added.token_to_id(*token) : impl->model->token_to_id(*token);
    return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
  };
  impl->bos_id = id_of(impl->config.bos_token);
  impl->eos_id = id_of(impl->config.eos_token);
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, const std::string& name) {
  return Tokenizer(text::TokenizerImpl::parse(tokenizer_json, name));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (text::is_valid_utf8(text)) {
    impl_->encode(text, add_special_tokens, ids);
  } else {
    impl_->encode(text::to_valid_utf8(text), add_special_tokens, ids);
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const int32_t added = impl_->added.token_to_id(token);
  return added >= 0 ? added : impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const auto s = impl_->token_string(id);
  LMX_REQUIRE(InvalidArgument, s.has_value(), "token id {} is not in the vocabulary (ids go up to {})", id, impl_->id_limit - 1);
  return std::string(*s);
}

bool Tokenizer::is_valid_id(int32_t id) const { return impl_->token_string(id).has_value(); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < impl_->id_limit && impl_->special[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return impl_->id_limit; }

const std::optional<std::string>& Tokenizer::bos_token() const { return impl_->config.bos_token; }
const std::optional<std::string>& Tokenizer::eos_token() const { return impl_->config.eos_token; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
const std::string& Tokenizer::chat_template() const { return impl_->config.chat_template; }
const std::map<std::string, std::string>& Tokenizer::chat_templates() const { return impl_->config.chat_templates; }

}  // namespace lmx
