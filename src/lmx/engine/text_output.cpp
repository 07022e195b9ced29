// lmx::TextOutput: detokenization and stop strings for one choice.
#include "lmx/engine/text_output.h"

#include "lmx/core/error.h"

#include <algorithm>

namespace lmx {

TextOutput::TextOutput(const Tokenizer* tokenizer, std::vector<std::string> stop, bool keep_special_tokens)
    : stop_(std::move(stop)) {
  for (size_t i = 0; i < stop_.size(); ++i)
    LMX_REQUIRE(InvalidArgument, !stop_[i].empty(), "stop string {} is empty", i);
  if (tokenizer) detokenizer_.emplace(*tokenizer, /*skip_special_tokens=*/!keep_special_tokens);
}

std::string TextOutput::feed(int32_t token) {
  if (stopped_ || !detokenizer_) return {};
  pending_ += detokenizer_->feed(token);
  return release(false);
}

std::string TextOutput::finish() {
  if (stopped_ || !detokenizer_) return {};
  pending_ += detokenizer_->flush();
  return release(true);
}

std::string TextOutput::release(bool final) {
  size_t match = std::string::npos;
  for (size_t i = 0; i < stop_.size(); ++i) {
    const size_t at = pending_.find(stop_[i]);
    if (at < match) {
      match = at;
      matched_stop_ = static_cast<int>(i);
    }
  }
  if (match != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, match);
    pending_.clear();
    return out;
  }
  // Hold the longest suffix of pending_ that is a proper prefix of a stop string: a later token may
  // complete it. (No match above, so no whole stop string is a suffix.)
  size_t hold = 0;
  if (!final)
    for (const std::string& s : stop_)
      for (size_t len = std::min(s.size() - 1, pending_.size()); len > hold; --len)
        if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
          hold = len;
          break;
        }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

}  // namespace lmx
