// One sequence's cached state as the engine sees it, whatever backend holds it (CPU KvCache,
// CUDA device caches): how many tokens it holds, and rewinding.
#pragma once

#include <cstdint>

namespace lmx {

class Sequence {
 public:
  virtual ~Sequence() = default;
  // Tokens appended so far (the position the next token takes).
  virtual int64_t length() const = 0;
  // Whether truncate(new_length) would succeed: every cache layer still stores what a query at
  // new_length attends to (sliding layers may have dropped old tokens).
  virtual bool can_truncate(int64_t new_length) const = 0;
  // Drops every token at position >= new_length. Throws InvalidArgument when can_truncate is false
  // or new_length is outside [0, length()].
  virtual void truncate(int64_t new_length) = 0;
};

}  // namespace lmx
