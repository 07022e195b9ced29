// Device-side addressing of paged KV storage (attention.h, PagedStore): the row of a sequence's position.
#pragma once

#include "lmx/ops/cuda/attention.h"

#include <cstdint>

namespace lmx::cuda {

// The first element of the row of position `pos` of sequence `seq` (rows of `row_elems` bf16 elements: one
// token's kv_heads · head_dim). The rows of one block are consecutive, so a 64-key tile starting at a
// multiple of 64 is one contiguous run from its first row.
__device__ __forceinline__ uint16_t* paged_row(const PagedStore& s, int seq, int pos, int64_t row_elems) {
  const int block = pos / s.block_tokens;
  char* base = static_cast<char*>(
      const_cast<void*>(s.blocks[static_cast<int64_t>(seq) * s.stride + block - s.first_block[seq]]));
  return reinterpret_cast<uint16_t*>(base + s.offset) +
         static_cast<int64_t>(pos - block * s.block_tokens) * row_elems;
}

}  // namespace lmx::cuda
