// PagedArrays: host arrays into device blocks with tables (paged_arrays.h).
#include "lmx/ops/cuda/paged_arrays.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <cstring>

namespace lmx::cuda {

PagedArrays::PagedArrays(const std::vector<std::vector<uint16_t>>& sequences, int64_t row_elems,
                         int block_tokens)
    : row_elems_(row_elems), block_tokens_(block_tokens) {
  LMX_REQUIRE(InvalidArgument, row_elems > 0 && block_tokens > 0 && !sequences.empty(),
              "PagedArrays: {} sequences of rows of {} in blocks of {}", sequences.size(), row_elems,
              block_tokens);
  const int64_t block_elems = row_elems * block_tokens;
  int64_t total = 0;
  for (const auto& s : sequences) {
    const int64_t rows = static_cast<int64_t>(s.size()) / row_elems;
    const int64_t blocks = std::max<int64_t>(1, (rows + block_tokens - 1) / block_tokens);
    first_block_of_seq_.push_back(total);
    stride_ = std::max(stride_, blocks);
    total += blocks;
  }
  // Block b (in sequence order) lives at slot total - 1 - b of the allocation.
  std::vector<uint16_t> host(static_cast<size_t>(total * block_elems), 0xffff);
  for (int64_t b = 0; b < total; ++b) slot_of_block_.push_back(total - 1 - b);
  for (size_t s = 0; s < sequences.size(); ++s) {
    const std::vector<uint16_t>& data = sequences[s];
    for (size_t i = 0; i < data.size(); ++i) {
      const int64_t row = static_cast<int64_t>(i) / row_elems,
                    block = first_block_of_seq_[s] + row / block_tokens;
      host[static_cast<size_t>(slot_of_block_[static_cast<size_t>(block)] * block_elems +
                               (row % block_tokens) * row_elems + static_cast<int64_t>(i) % row_elems)] =
          data[i];
    }
  }
  blocks_ = DeviceBuffer::upload(host.data(), host.size() * 2);
  std::vector<const void*> table(sequences.size() * static_cast<size_t>(stride_), nullptr);
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t next = s + 1 < sequences.size() ? first_block_of_seq_[s + 1] : total;
    for (int64_t b = first_block_of_seq_[s]; b < next; ++b)
      table[s * static_cast<size_t>(stride_) + static_cast<size_t>(b - first_block_of_seq_[s])] =
          blocks_.as<uint16_t>() + slot_of_block_[static_cast<size_t>(b)] * block_elems;
  }
  table_ = upload_vector(table);
  first_ = upload_vector(std::vector<int32_t>(sequences.size(), 0));
}

std::vector<uint16_t> PagedArrays::download(int seq, int64_t rows) const {
  const int64_t block_elems = row_elems_ * block_tokens_;
  std::vector<uint16_t> all(blocks_.bytes() / 2);
  blocks_.download(all.data(), blocks_.bytes());
  std::vector<uint16_t> out(static_cast<size_t>(rows * row_elems_));
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t block = first_block_of_seq_[static_cast<size_t>(seq)] + row / block_tokens_;
    std::memcpy(out.data() + row * row_elems_,
                all.data() + slot_of_block_[static_cast<size_t>(block)] * block_elems +
                    (row % block_tokens_) * row_elems_,
                static_cast<size_t>(row_elems_) * 2);
  }
  return out;
}

PagedStore PagedArrays::store() const {
  PagedStore s;
  s.blocks = table_.as<const void* const>();
  s.stride = stride_;
  s.first_block = first_.as<const int32_t>();
  s.block_tokens = block_tokens_;
  s.offset = 0;
  return s;
}

PagedStore contiguous_as_pages(const std::vector<const uint16_t*>& arrays, int64_t capacity,
                               int64_t row_elems, int block_tokens, DeviceBuffer& table,
                               DeviceBuffer& first) {
  const int64_t blocks = std::max<int64_t>(1, (capacity + block_tokens - 1) / block_tokens);
  std::vector<const void*> host;
  for (const uint16_t* a : arrays)
    for (int64_t b = 0; b < blocks; ++b) host.push_back(a + b * block_tokens * row_elems);
  table = upload_vector(host);
  first = upload_vector(std::vector<int32_t>(arrays.size(), 0));
  PagedStore s;
  s.blocks = table.as<const void* const>();
  s.stride = blocks;
  s.first_block = first.as<const int32_t>();
  s.block_tokens = block_tokens;
  return s;
}

}  // namespace lmx::cuda
