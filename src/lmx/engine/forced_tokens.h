// lmx::ForcedTokens: constrained decoding to one of a few token sequences — a forced tool call's opening
// (OpenAI's tool_choice "required" or a named function), tokenized as the model writes it, special tokens as
// themselves. Until one sequence is written whole, the engine masks every token that continues none of the
// sequences that agree with what was written so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lmx {

class ForcedTokens {
 public:
  // `sequences`: at least one, none empty (InvalidArgument otherwise).
  explicit ForcedTokens(std::vector<std::vector<int32_t>> sequences);

  // Whether `id` continues a sequence that agrees with the tokens so far (any id once complete).
  bool allows(int32_t id) const;
  // The ids allowed next (empty once complete).
  std::vector<int32_t> next() const;
  // Appends `id` (which allows() accepted).
  void accept(int32_t id);
  // Whether a whole sequence has been written, and which (its index; -1 before).
  bool complete() const { return complete_; }
  int completed() const { return completed_; }

 private:
  std::vector<std::vector<int32_t>> sequences_;
  std::vector<bool> alive_;  // per sequence: agrees with the tokens so far
  size_t written_ = 0;
  bool complete_ = false;
  int completed_ = -1;
};

}  // namespace lmx
