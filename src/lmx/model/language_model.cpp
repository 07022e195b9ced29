// LanguageModel's default greedy step: forward() on the host, then argmax per row.
#include "lmx/model/language_model.h"

#include "lmx/ops/ops.h"

namespace lmx {

std::vector<int32_t> LanguageModel::forward_argmax(std::span<const StepRow> rows) {
  Tensor logits = forward(rows);
  const int64_t vocab = logits.dim(1);
  std::vector<int32_t> tokens;
  tokens.reserve(rows.size());
  for (int64_t r = 0; r < logits.dim(0); ++r)
    tokens.push_back(ops::argmax({logits.data<float>() + r * vocab, static_cast<size_t>(vocab)}));
  return tokens;
}

}  // namespace lmx
