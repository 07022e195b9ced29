// StreamingDetokenizer: incremental decoding with a sliding window of ids.
#include "lmx/text/detokenizer.h"

#include "lmx/core/error.h"
#include "lmx/text/tokenizer_impl.h"

namespace lmx {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) { return std::string_view(s).ends_with(kReplacement); }

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDetokenizer::feed(int32_t id) {
  LMX_REQUIRE(InvalidArgument, tokenizer_.is_valid_id(id), "detokenizer: token id {} is not in the vocabulary (ids go up to {})",
                           id, tokenizer_.vocab_size() - 1);
  ids_.push_back(id);
  if (in_byte_run()) return {};
  const std::string text = tokenizer_.decode(ids_, skip_special_tokens_);
  // Hold back while the text may still change: a trailing U+FFFD (an incomplete character), or a
  // decode that does not extend the context's text (then only flush can settle it).
  if (text.size() <= prefix_.size() || ends_with_replacement(text) || !text.starts_with(prefix_)) return {};
  std::string fresh = text.substr(prefix_.size());
  // The ids just emitted become the context that the next ids are decoded with.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_count_));
  prefix_ = tokenizer_.decode(ids_, skip_special_tokens_);
  prefix_count_ = ids_.size();
  return fresh;
}

std::string StreamingDetokenizer::flush() {
  std::string rest;
  if (ids_.size() > prefix_count_) {
    const std::string text = tokenizer_.decode(ids_, skip_special_tokens_);
    if (text.starts_with(prefix_)) rest = text.substr(prefix_.size());
  }
  reset();
  return rest;
}

bool StreamingDetokenizer::in_byte_run() const {
  const auto& byte_tokens = tokenizer_.impl().byte_fallback_tokens;
  if (byte_tokens.empty()) return false;
  for (size_t i = ids_.size(); i-- > 0;) {
    const int32_t id = ids_[i];
    if (skip_special_tokens_ && tokenizer_.is_special(id)) continue;  // dropped before the decoder
    return byte_tokens[static_cast<size_t>(id)];
  }
  return false;
}

void StreamingDetokenizer::reset() {
  ids_.clear();
  prefix_.clear();
  prefix_count_ = 0;
}

}  // namespace lmx
