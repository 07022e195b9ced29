// quantized_linear, quantized_linear_gelu and quantized_linear_geglu (linear.h): argument checks and the
// choice of weight format; the kernels are the tensor-core projections of linear_tiles.cuh (decode:
// quantized_gemv.cu, prefill: quantized_gemm.cu) and the batch-1 4-bit GEMV (linear_decode_q4.cuh).
#include "lmx/ops/cuda/cuda_check.h"
#include "lmx/ops/cuda/elementwise.h"
#include "lmx/ops/cuda/elementwise_util.cuh"
#include "lmx/ops/cuda/linear.h"
#include "lmx/ops/cuda/linear_decode_q4.cuh"
#include "lmx/ops/cuda/linear_tiles.cuh"
#include "lmx/ops/cuda/tuning.h"

#include <fmt/format.h>

#include <algorithm>

namespace lmx::cuda {

namespace linear {

namespace {
// The segments of a 4-bit [n, k] weight: the table's linear.q4_segments entry for its shape, else
// linear_segments with the table's warp target and one-segment rule, no shorter than kPairMinChunks chunks
// for a gate_up pair.
int q4_segments(int64_t n, int64_t k, int chunks, bool gate_up_pair, const CudaTuning::Linear& rules) {
  if (const int set = shape_segments(rules.q4_segments, "cuda.linear.q4_segments", n, k, chunks); set > 0)
    return set;
  const int s = linear_segments(n, k, 4, rules.q4_target_warps, rules.q4_one_segment_tiles);
  return gate_up_pair ? std::max(1, std::min(s, chunks / kPairMinChunks)) : s;
}
}  // namespace

int64_t decode_max_rows() {
  return tuning().linear.decode_max_rows;
}

void complete(Problem& p, const CudaTuning& table) {
  LMX_REQUIRE(InvalidArgument, p.n <= int64_t{65535} * 16, "linear: {} output features exceed the grid limit",
              p.n);
  p.chunks = static_cast<int>((p.k + kChunk - 1) / kChunk);
  p.segments = p.bits == 4 ? q4_segments(p.n, p.k, p.chunks, p.gate_up_pair, table.linear)
                           : linear_segments(p.n, p.k, p.bits);
  p.x_vec4 = detail::aligned16(p.x) && (p.x_stride % 4 == 0 || p.m == 1);
}

void run(Problem p, CudaContext& ctx) {
  complete(p);
  if (p.m > decode_max_rows())
    run_prefill(p, ctx);
  else
    launch_decode(p, ctx.stream());
}

void run_prefill(const Problem& p, CudaContext& ctx, const XRows& rows) {
  auto* xp = static_cast<uint32_t*>(ctx.scratch(Scratch::kLinearInput, prefill_scratch_bytes(p)));
  launch_prefill(p, xp, ctx.stream(), rows);
}

Problem quantized_problem(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                          int64_t out_stride, const CudaTuning& table) {
  Problem p;
  const bool aligned = detail::aligned16(w.codes);
  p.format = aligned && w.bits == 4   ? WeightFormat::kQ4
             : aligned && w.bits == 8 ? WeightFormat::kQ8
                                      : WeightFormat::kPacked;
  p.bits = w.bits;
  p.group_shift = log2_group_size(w.group_size);
  p.scale_dtype = w.scale_dtype;
  p.weight = w.codes;
  p.scales = w.scales;
  p.biases = w.biases;
  p.small_scales = w.small_scales && table.linear.small_scales;
  p.gate_up_pair = w.gate_up_pair;
  p.n = w.rows;
  p.k = w.cols;
  p.row_words = w.cols * w.bits / 32;
  p.groups_per_row = w.cols / w.group_size;
  p.x = x;
  p.x_stride = x_stride;
  p.m = m;
  p.out = out;
  p.out_stride = out_stride;
  return p;
}

}  // namespace linear

namespace {

// The checks every quantized projection makes; `op` names the caller in the message.
void check_quantized(const char* op, const DeviceQuantized& w, int64_t x_stride, int64_t m,
                     int64_t out_stride) {
  const bool bits_ok = w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8;
  const bool group_ok = w.group_size == 32 || w.group_size == 64 || w.group_size == 128;
  LMX_REQUIRE(InvalidArgument, bits_ok && group_ok, "{}: unsupported bits {} / group size {}", op, w.bits,
              w.group_size);
  LMX_REQUIRE(InvalidArgument, w.batch == 1, "{}: weight batch must be 1, got {}", op, w.batch);
  LMX_REQUIRE(InvalidArgument, w.rows >= 0 && w.cols > 0 && w.cols % w.group_size == 0,
              "{}: weight [{}, {}] columns must be a positive multiple of the group size {}", op, w.rows,
              w.cols, w.group_size);
  LMX_REQUIRE(InvalidArgument,
              w.scale_dtype == DType::kBF16 || w.scale_dtype == DType::kF16 || w.scale_dtype == DType::kF32,
              "{}: scale dtype must be bf16, f16 or f32", op);
  LMX_REQUIRE(InvalidArgument, m >= 0 && x_stride >= w.cols && out_stride >= w.rows,
              "{}: M {} with x stride {} (K {}) and out stride {} (N {})", op, m, x_stride, w.cols,
              out_stride, w.rows);
}

}  // namespace

void quantized_linear(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                      int64_t out_stride, CudaContext& ctx) {
  check_quantized("quantized_linear", w, x_stride, m, out_stride);
  if (m == 0 || w.rows == 0) return;
  linear::run(linear::quantized_problem(x, x_stride, m, w, out, out_stride), ctx);
}

void quantized_linear_gelu(float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t m,
                           const DeviceQuantized& w, float* out, int64_t out_stride, CudaContext& ctx) {
  check_quantized("quantized_linear_gelu", w, gate_stride, m, out_stride);
  LMX_REQUIRE(InvalidArgument, up_stride >= w.cols, "quantized_linear_gelu: up stride {} below K {}",
              up_stride, w.cols);
  if (m == 0 || w.rows == 0) return;
  linear::Problem p = linear::quantized_problem(gate, gate_stride, m, w, out, out_stride);
  linear::complete(p);
  if (linear::q4_gemv_applies(p) && detail::aligned16(up)) {  // (then M == 1: the decode path)
    linear::launch_decode(p, ctx.stream(), up);
    return;
  }
  if (p.m > linear::decode_max_rows()) {  // the prefill path: its x preparation forms the product
    linear::XRows rows;
    rows.up = up;
    rows.up_stride = up_stride;
    linear::run_prefill(p, ctx, rows);
    return;
  }
  // Two kernels: the product into gate, then the projection.
  gelu_tanh_mul(gate, gate_stride, up, up_stride, gate, gate_stride, m, w.cols, ctx.stream());
  linear::run(p, ctx);
}

bool quantized_linear_geglu(const float* x, int64_t x_stride, int64_t m, const DeviceQuantized& w, float* out,
                            CudaContext& ctx) {
  check_quantized("quantized_linear_geglu", w, x_stride, m, w.rows);
  if (m != 1 || w.rows % 2 != 0 || w.rows / 2 < tuning().q4_gemv.geglu_min_rows) return false;
  linear::Problem p = linear::quantized_problem(x, x_stride, m, w, out, w.rows);
  linear::complete(p);
  return linear::launch_decode_geglu(p, ctx.stream());
}

}  // namespace lmx::cuda
