// CUDA per-request sampling (lmx/ops/sampling_rows.h states what each entry computes).
#pragma once

#include "lmx/ops/sampling_rows.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace lmx::cuda {

// One block per entry e of `entries`: processed[e, :] = logits[params[e].row, :] (rows `logits_stride`
// floats apart) with edits[params[e].edits_begin ..][.. edits_count] applied, then out[e] as
// sampling_rows.h says. Every reduction has a fixed order, so an entry's result depends only on its own
// row, settings and edits (batch invariance), and is the same on every run. Row indices and edit ids are
// validated by the caller.
void sample_rows(const float* logits, int64_t logits_stride, int vocab, int64_t entries,
                 const SamplingRowParams* params, const LogitEdit* edits, float* processed, SampledRow* out,
                 cudaStream_t stream);

}  // namespace lmx::cuda
