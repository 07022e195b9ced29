// Contiguous per-sequence KV arrays copied into device blocks with block tables, in the layout the paged
// attention kernels read (PagedStore): how tests and benchmarks give the kernels caches they made on the
// host. The blocks of all sequences share one allocation in reverse order, so that no sequence's blocks are
// contiguous or in order.
#pragma once

#include "lmx/ops/cuda/attention.h"
#include "lmx/ops/cuda/device_memory.h"

#include <cstdint>
#include <vector>

namespace lmx::cuda {

class PagedArrays {
 public:
  // sequences[s]: rows of row_elems elements of elem_bytes bytes each (bf16: 2, f32: 4), a multiple of
  // row_elems elements. Each sequence gets ceil(rows / block_tokens) blocks (at least one); rows past its
  // array are filled with 0xff bytes (NaN).
  PagedArrays(const std::vector<std::vector<uint16_t>>& sequences, int64_t row_elems, int block_tokens);
  // Sequence s's first `rows` rows, read back from the blocks.
  std::vector<uint16_t> download(int seq, int64_t rows) const;
  // The view the kernels read (offset 0 inside each block).
  PagedStore store() const;

 private:
  int64_t row_elems_ = 0, stride_ = 0;
  int block_tokens_ = 0;
  std::vector<int64_t> first_block_of_seq_;  // index of each sequence's block 0 in the table order
  std::vector<int64_t> slot_of_block_;       // table order -> position in the allocation
  DeviceBuffer blocks_, table_, first_;
};

// Views contiguous device arrays (each [capacity, row_elems] bf16) as paged storage of block_tokens rows per
// block: block i of sequence s is arrays[s] + i · block_tokens rows. The tables are written to `table` and
// `first`, which the caller keeps while the view is used (benchmarks: no copy of the caches).
PagedStore contiguous_as_pages(const std::vector<const uint16_t*>& arrays, int64_t capacity,
                               int64_t row_elems, int block_tokens, DeviceBuffer& table, DeviceBuffer& first);

}  // namespace lmx::cuda
