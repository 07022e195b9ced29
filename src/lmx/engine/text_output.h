// lmx::TextOutput: one choice's generated tokens as streamed text — incremental detokenization and
// stop strings matched on the decoded text, holding back text while it could still begin a stop string.
#pragma once

#include "lmx/text/detokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmx {

class TextOutput {
 public:
  // Without a tokenizer the text is always empty and stop strings never match. Stop strings must be
  // non-empty (InvalidArgument). Special tokens (<|tool_call>, <|channel>, ...) are left out of the text
  // unless `keep_special_tokens` (front ends that parse tool calls or reasoning from the text need them).
  TextOutput(const Tokenizer* tokenizer, std::vector<std::string> stop, bool keep_special_tokens = false);

  // Feeds one generated token (not a stop token id); returns the text that can be emitted now. Once a
  // stop string matched, stopped() is true, the text before the match has been returned and later
  // calls return "".
  std::string feed(int32_t token);
  // The generation ended: returns the text still held back (up to a stop string it completes).
  std::string finish();
  bool stopped() const { return stopped_; }
  // The index of the stop string that matched, or -1.
  int matched_stop() const { return matched_stop_; }

 private:
  // Emits pending_ up to a stop string it contains (then stopped_), else all but the longest suffix
  // that begins some stop string (all of it when `final`).
  std::string release(bool final);

  std::optional<StreamingDetokenizer> detokenizer_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded, not yet emitted
  bool stopped_ = false;
  int matched_stop_ = -1;
};

}  // namespace lmx
