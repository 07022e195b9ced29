// The view of paged KV storage that attention kernels read (kv/ fills it; every backend's kernels take
// it): one sequence's keys and values of one cache layer in fixed-size token blocks.
#pragma once

#include "lmx/core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace lmx {

// Block i of `blocks` holds positions [(first_block + i) * block_tokens, ... + block_tokens); position p
// sits at slot p % block_tokens. Inside a block, the layer's keys start k_offset bytes in and its values
// v_offset bytes in, each [block_tokens, kv_heads, head_dim] of `dtype` (f32 or bf16) — or, when
// quant_bits > 0, MLX affine codes along head_dim (AffineKvHalf below) with `dtype` (bf16) scales and
// biases; or, when turbo, TurboQuant rows (lmx/quant/turbo.h: quant_bits-bit keys, value_bits-bit rotated
// values), row slot · kv_heads + head at row · the row's bytes. Positions [first_block * block_tokens,
// kv_len) are valid.
struct PagedKvRow {
  std::span<const void* const> blocks;
  int64_t first_block = 0;
  int64_t kv_len = 0;
  int block_tokens = 0;
  size_t k_offset = 0, v_offset = 0;
  int kv_heads = 0, head_dim = 0;
  DType dtype = DType::kF32;
  int quant_bits = 0, quant_group = 0;
  int value_bits = 0;
  bool turbo = false;
};

// Where one token-head's codes, scales and biases sit inside one half (keys or values) of an affine block:
// codes [block_tokens, kv_heads, head_dim · bits / 32] u32, then scales [block_tokens, kv_heads,
// head_dim / group], then biases of that shape (2-byte scale elements). `row` = slot · kv_heads + head.
struct AffineKvHalf {
  int64_t block_tokens = 0, kv_heads = 0, head_dim = 0;
  int bits = 0, group = 0;

  size_t code_words() const { return static_cast<size_t>(head_dim * bits / 32); }
  size_t groups() const { return static_cast<size_t>(head_dim / group); }
  size_t codes_at(int64_t row) const { return static_cast<size_t>(row) * code_words() * 4; }
  size_t scales_at(int64_t row) const {
    return static_cast<size_t>(block_tokens * kv_heads) * code_words() * 4 +
           static_cast<size_t>(row) * groups() * 2;
  }
  size_t biases_at(int64_t row) const {
    return scales_at(row) + static_cast<size_t>(block_tokens * kv_heads) * groups() * 2;
  }
};

}  // namespace lmx

namespace lmx {

// A ragged step's rows as the paged attention ops see them, in the memory of the backend that reads them.
struct PagedKvStep {
  int64_t tokens = 0, rows = 0;
  const int32_t* q_pos = nullptr;   // [tokens] position of each token
  const int32_t* q_row = nullptr;   // [tokens] row of each token, in [0, rows)
  const int32_t* kv_len = nullptr;  // [rows] positions valid once the step's tokens are appended
  int64_t max_kv_len = 0;           // host-side bound on every kv_len (sizes split-KV grids)
  int block_tokens = 0;
};

// One cache group's block tables for a step: row r's blocks first_block[r], first_block[r] + 1, ... are at
// blocks[r * stride], blocks[r * stride + 1], ... (block b holds positions [b * block_tokens, ...)).
struct PagedKvTables {
  const void* const* blocks = nullptr;
  int64_t stride = 0;
  const int32_t* first_block = nullptr;  // [rows]
};

// One cache layer of a step: its group's tables and its place inside a block (PagedKvRow's layout).
struct PagedKvLayer {
  PagedKvTables tables;
  size_t k_offset = 0, v_offset = 0;
  int kv_heads = 0, head_dim = 0;
  DType dtype = DType::kF32;
  int quant_bits = 0, quant_group = 0;  // > 0: affine codes, or TurboQuant keys (PagedKvRow)
  int value_bits = 0;
  bool turbo = false;
  int window = 0;
};

}  // namespace lmx
