// A step's paged KV view with host pointers, for a KvCache whose blocks are host memory: what the
// executor stages for the CPU backend, built directly (tests and tools append and attend through it with
// ops::paged_kv_append / ops::paged_attention).
#pragma once

#include "lmx/kv/kv_cache.h"
#include "lmx/ops/paged_kv.h"

#include <span>
#include <vector>

namespace lmx {

class HostKvStep {
 public:
  // The rows must have been prepared (KvCache::prepare) and not yet committed; the view is valid until the
  // next prepare, commit or truncate of any of them.
  HostKvStep(const KvCache& cache, std::span<const KvRow> rows);

  const PagedKvStep& step() const { return step_; }
  // Cache layer `cache_layer`'s view.
  PagedKvLayer layer(int cache_layer) const;

 private:
  const KvCache& cache_;
  const KvLayout* layout_;  // the rows' (one phase under a quantization start)
  PagedKvStep step_;
  std::vector<int32_t> positions_, rows_, kv_len_;
  std::vector<std::vector<int32_t>> first_block_;  // per group
  std::vector<std::vector<const void*>> blocks_;   // per group [rows × stride]
  std::vector<int64_t> strides_;
};

}  // namespace lmx
