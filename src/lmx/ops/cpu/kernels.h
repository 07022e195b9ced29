// Internal CPU kernels behind ops.h and quantized.h: runtime-dispatched SIMD (Highway) entry points and
// the threaded linear drivers shared by linear, moe_experts and their quantized forms. Not public.
#pragma once

#include "lmx/core/thread_pool.h"

#include "lmx/core/dtype.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace lmx::ops {
struct QuantizedWeight;
}

namespace lmx::ops::cpu {

// out[i] = gelu_tanh(gate[i]) * up[i] for i < n (up == nullptr: gelu_tanh(gate[i])); out may alias gate or
// up. The one CPU GELU (activation_simd.cpp has its numerics); single-threaded.
void gelu_tanh_mul_row(const float* gate, const float* up, float* out, int64_t n);
// x[i] = cap * tanh(x[i] / cap) for i < n (tanh as in gelu_tanh_mul_row); single-threaded.
void softcap_row(float* x, int64_t n, float cap);

// out[m, n] = Σ_k x[m, k] * w[n, k] over raw row pointers. Strides count elements between rows.
struct LinearArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const void* w = nullptr;  // float rows, or bf16 rows (raw uint16_t bits) when w_bf16
  bool w_bf16 = false;
  int64_t w_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  int64_t k = 0;
};

// Computes the block out[m0:m1, n0:n1] on the calling thread.
// Reduction order contract: out[m, n] is accumulated as one vector of L f32 lanes (L = the SIMD
// target's f32 lane count), element k landing in lane k % L, blocks of L added by FMA in increasing k;
// the K % L tail is one more FMA step with both operands zero-padded; then one fixed horizontal sum.
// So the value depends only on K and the target — never on the block bounds, M, or the other rows.
void linear_block(const LinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

// Work split for out[0:m, 0:n]: `tasks()` independent blocks, `block(t, ...)` gives task t's bounds.
// Consecutive tasks share their rows of x (so a chunk of tasks reuses x from cache).
struct LinearTiling {
  int64_t m = 0, n = 0;
  int64_t m_block = 1, n_block = 1;
  int64_t n_blocks() const { return (n + n_block - 1) / n_block; }
  int64_t tasks() const { return (m + m_block - 1) / m_block * n_blocks(); }
  void block(int64_t task, int64_t& m0, int64_t& m1, int64_t& n0, int64_t& n1) const;
};
LinearTiling linear_tiling(int64_t m, int64_t n);

// Runs block(m0, m1, n0, n1) for every task of `tiling` over the default pool, with chunks of at least
// ~2^18 multiply-adds (k per output) so small problems are not split across threads.
template <typename Block>
void run_tiles(const LinearTiling& tiling, int64_t k, Block&& block) {
  constexpr int64_t kMinMacsPerChunk = int64_t{1} << 18;
  const int64_t macs_per_task = tiling.m_block * tiling.n_block * (k > 1 ? k : 1);
  const int64_t grain = kMinMacsPerChunk / macs_per_task > 1 ? kMinMacsPerChunk / macs_per_task : 1;
  parallel_for(tiling.tasks(), grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      int64_t m0, m1, n0, n1;
      tiling.block(task, m0, m1, n0, n1);
      block(m0, m1, n0, n1);
    }
  });
}

// out[0:m, 0:n] over the default thread pool (values as linear_block).
void linear_threaded(const LinearArgs& args, int64_t m, int64_t n);

// Σ a[i] * b[i] in f32 (SIMD, fixed order for a given n and target).
float dot(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i] (x f32, or bf16 bits widened exactly).
void axpy(float alpha, const float* x, float* y, int64_t n);
void axpy(float alpha, const uint16_t* x_bf16, float* y, int64_t n);

// ---- MLX affine-quantized weights (quantized_*.cpp) ----------------------------------------------------

// One [N, K] matrix in MLX affine layout as raw pointers (for a stack: one expert's slice). Row n's codes
// are the K*bits/32 words at codes + n * words_per_row(); its K/group_size scales and biases start at
// element n * groups_per_row() of `scales` / `biases` (dtype scale_dtype: F32, BF16 or F16).
struct QuantizedMatrix {
  const uint32_t* codes = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  DType scale_dtype = DType::kBF16;
  int bits = 0, group_size = 0;
  int64_t k = 0;
  int64_t words_per_row() const { return k * bits / 32; }
  int64_t groups_per_row() const { return k / group_size; }
};

// out[m, n] = Σ_k x[m, k] * w[n, k] with w = fma(scale, q, bias) (see ops/quantized.h for the contract).
// x is given in the form prepare_rows chose for w: either f32 rows holding the K columns in the f32
// kernels' column order for w.bits (the natural order, or, when quantized_reorders_columns, the rows
// written by quantized_prepare_x), or, when xq is set, rows written by quantized_integer_prepare_x for
// w's bits and group size (the integer kernels run; x is then unused).
struct QuantizedLinearArgs {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const uint8_t* xq = nullptr;  // 64-byte aligned rows
  int64_t xq_stride = 0;        // bytes: quantized_integer_row_bytes(w.k, w.group_size, w.bits)
  QuantizedMatrix w;
  float* out = nullptr;
  int64_t out_stride = 0;
};

// Whether the kernels for `bits` visit columns in another order than the natural one, under the SIMD
// target chosen at start-up (4-bit: per block of 2L columns, the L even columns then the L odd ones).
bool quantized_reorders_columns(int bits);
// Writes `rows` rows of k floats (row stride x_stride) into out (row stride k) in the column order of the
// kernels for `bits`. The same permutation applied to any two rows preserves their dot product's terms.
void quantized_prepare_x(const float* x, int64_t x_stride, int64_t rows, int64_t k, int bits, float* out);

// Computes the block out[m0:m1, n0:n1] on the calling thread: quantized_integer_block when args.xq is
// set, else quantized_f32_block. Either way out[m, n] depends only on K, bits, the group size, the
// target and the path, never on the block bounds or on the other rows.
void quantized_linear_block(const QuantizedLinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
// The f32 kernels (quantized_simd.cpp). Reduction order contract: out[m, n] accumulates x[m, k] * w[n, k]
// into one vector of L f32 lanes by FMA, column at position p of the kernel order landing in lane p % L,
// positions in increasing order, then one fixed horizontal sum — so it depends only on K, bits and the
// target, never on the block bounds or on the other rows.
void quantized_f32_block(const QuantizedLinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);
// Work split for quantized_linear_block over out[0:m, 0:n] (as LinearTiling).
LinearTiling quantized_linear_tiling(int64_t m, int64_t n);
// out[0:m, 0:n] over the default thread pool.
void quantized_linear_threaded(const QuantizedLinearArgs& args, int64_t m, int64_t n);

// Checks w (a valid affine triple of rank `ndim`, contiguous) and returns its raw view (for a stack, of
// all experts: see expert_matrix). InvalidArgument naming `op` and `what` otherwise.
QuantizedMatrix quantized_matrix(const QuantizedWeight& w, int ndim, const char* op, const char* what);
// Expert `expert`'s [rows_per_expert, K] slice of a stack viewed by quantized_matrix.
QuantizedMatrix expert_matrix(const QuantizedMatrix& stack, int64_t rows_per_expert, int64_t expert);

// ---- Integer kernels for 4- and 8-bit weights (quantized_vnni.cpp) ----------------------------------------
// On targets with AVX-512 VNNI, x is quantized to 24-bit fixed point with a power-of-two unit per 8 columns
// (|error| ≤ 1.008 * 2^-23 * max|x over those 8 columns| per element) and multiplied with the codes in
// int32; see quantized_vnni.cpp for the numerics and the row layout.

// Whether quantized_linear and quantized_moe_experts run the integer kernels for `bits`-bit weights now:
// 4 or 8 bits, a CPU and dispatched SIMD target with AVX-512 VNNI, and the debug knob on.
bool quantized_integer_kernels(int bits);
// Debug knob for benchmarks and tests that compare both paths (default on; the environment variable
// LMX_QUANT_INTEGER=0 at start-up turns it off). Not thread-safe against running ops.
void set_quantized_integer_kernels(bool enabled);
// Bytes of one x row prepared for `bits`-bit weights (a multiple of 64).
int64_t quantized_integer_row_bytes(int64_t k, int group_size, int bits);
// Writes `rows` rows of k floats (row stride x_stride) into out (64-byte aligned, row stride
// quantized_integer_row_bytes) for `bits`-bit weights of group `group_size`. Each row is prepared on its own.
void quantized_integer_prepare_x(const float* x, int64_t x_stride, int64_t rows, int64_t k, int group_size,
                                 int bits, uint8_t* out);
// The integer kernels over args.xq (prepared for w.bits, 4 or 8; only while
// quantized_integer_kernels(w.bits)).
void quantized_integer_block(const QuantizedLinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1);

// Rows of x in the form the kernels for a weight take (see QuantizedLinearArgs): for the integer kernels,
// prepared rows owned by `quantized_buffer`; else f32 rows in the f32 kernels' column order: x itself
// when that order is natural, else a reordered copy owned by `buffer`.
struct PreparedRows {
  const float* data = nullptr;
  int64_t stride = 0;
  const uint8_t* quantized = nullptr;
  int64_t quantized_stride = 0;
  std::vector<float> buffer;
  std::unique_ptr<uint8_t[]> quantized_buffer;
  // Points args at these rows from row `row0` on.
  void bind(QuantizedLinearArgs& args, int64_t row0) const;
};
PreparedRows prepare_rows(const float* x, int64_t x_stride, int64_t rows, const QuantizedMatrix& w);
// Whether rows prepared for a serve b too (same path, and the same order or integer layout).
bool same_preparation(const QuantizedMatrix& a, const QuantizedMatrix& b);

// Row `row` of w dequantized into out[0:k] in the natural column order: out[j] = fma(scale, q, bias) * mul.
void quantized_dequantize_row(const QuantizedMatrix& w, int64_t row, float mul, float* out);

}  // namespace lmx::ops::cpu
