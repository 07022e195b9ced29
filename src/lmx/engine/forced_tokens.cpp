// ForcedTokens (forced_tokens.h).
#include "lmx/engine/forced_tokens.h"

#include "lmx/core/error.h"

#include <algorithm>

namespace lmx {

ForcedTokens::ForcedTokens(std::vector<std::vector<int32_t>> sequences) : sequences_(std::move(sequences)) {
  LMX_REQUIRE(InvalidArgument, !sequences_.empty(), "forced tokens: no sequence");
  for (const auto& s : sequences_)
    LMX_REQUIRE(InvalidArgument, !s.empty(), "forced tokens: an empty sequence");
  alive_.assign(sequences_.size(), true);
}

bool ForcedTokens::allows(int32_t id) const {
  if (complete_) return true;
  for (size_t i = 0; i < sequences_.size(); ++i)
    if (alive_[i] && sequences_[i][written_] == id) return true;
  return false;
}

std::vector<int32_t> ForcedTokens::next() const {
  std::vector<int32_t> ids;
  if (complete_) return ids;
  for (size_t i = 0; i < sequences_.size(); ++i)
    if (alive_[i] && std::find(ids.begin(), ids.end(), sequences_[i][written_]) == ids.end())
      ids.push_back(sequences_[i][written_]);
  return ids;
}

void ForcedTokens::accept(int32_t id) {
  if (complete_) return;
  for (size_t i = 0; i < sequences_.size(); ++i) {
    if (!alive_[i]) continue;
    alive_[i] = sequences_[i][written_] == id;
    if (alive_[i] && written_ + 1 == sequences_[i].size() && !complete_) {
      complete_ = true;
      completed_ = static_cast<int>(i);
    }
  }
  ++written_;
}

}  // namespace lmx
