// quantized_linear and quantized_embedding over MLX affine weights: argument checks, the choice between the
// f32 kernels (quantized_simd.cpp) and the integer ones (quantized_vnni.cpp), x preparation, work split and
// threading.
#include "lmx/core/thread_pool.h"
#include "lmx/ops/cpu/checks.h"
#include "lmx/ops/cpu/kernels.h"
#include "lmx/ops/quantized.h"
#include "lmx/quant/affine.h"

#include <algorithm>
#include <vector>

namespace lmx::ops {

int64_t QuantizedWeight::rows() const {
  return codes.dim(-2);
}
int64_t QuantizedWeight::cols() const {
  return codes.dim(-1) * 32 / bits;
}
size_t QuantizedWeight::bytes() const {
  return codes.nbytes() + scales.nbytes() + biases.nbytes();
}

namespace cpu {
namespace {
// Fewer x rows than this (decode): a task is kDecodeRowsPerTask weight rows × all x rows. (The same
// threshold as the blocks' decode/prefill switch in quantized_simd.cpp; values never depend on either.)
constexpr int64_t kPanelMinRows = 16;
constexpr int64_t kDecodeRowsPerTask = 32;
// Otherwise (prefill) a task is up to kMaxRowsPerTask x rows × kPanelRowsPerTask weight rows, whose
// dequantized panel is reused by all the task's x rows.
constexpr int64_t kMaxRowsPerTask = 64;
constexpr int64_t kPanelRowsPerTask = 48;
}  // namespace

QuantizedMatrix quantized_matrix(const QuantizedWeight& w, int ndim, const char* op, const char* what) {
  try {
    quant::validate_affine(w.codes, w.scales, w.biases, w.bits, w.group_size, what);
  } catch (const FormatError& e) {
    throw InvalidArgument(fmt::format("{}: {}", op, e.what()));
  }
  LMX_REQUIRE(InvalidArgument, w.codes.ndim() == ndim, "{}: {} codes {} must be {}-D", op, what,
                           shape_string(w.codes.shape()), ndim);
  LMX_REQUIRE(InvalidArgument, w.codes.is_contiguous() && w.scales.is_contiguous() && w.biases.is_contiguous(),
                           "{}: {} codes, scales and biases must be contiguous", op, what);
  QuantizedMatrix m;
  m.codes = w.codes.data<uint32_t>();
  m.scales = w.scales.raw_data();
  m.biases = w.biases.raw_data();
  m.scale_dtype = w.scales.dtype();
  m.bits = w.bits;
  m.group_size = w.group_size;
  m.k = w.cols();
  return m;
}

QuantizedMatrix expert_matrix(const QuantizedMatrix& stack, int64_t rows_per_expert, int64_t expert) {
  QuantizedMatrix m = stack;
  const size_t scale_bytes = dtype_size(stack.scale_dtype);
  m.codes += expert * rows_per_expert * stack.words_per_row();
  const size_t offset = static_cast<size_t>(expert * rows_per_expert * stack.groups_per_row()) * scale_bytes;
  m.scales = static_cast<const std::byte*>(stack.scales) + offset;
  m.biases = static_cast<const std::byte*>(stack.biases) + offset;
  return m;
}

void quantized_linear_block(const QuantizedLinearArgs& args, int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
  if (args.xq != nullptr) {
    quantized_integer_block(args, m0, m1, n0, n1);
  } else {
    quantized_f32_block(args, m0, m1, n0, n1);
  }
}

void PreparedRows::bind(QuantizedLinearArgs& args, int64_t row0) const {
  if (quantized != nullptr) {
    args.xq = quantized + row0 * quantized_stride;
    args.xq_stride = quantized_stride;
  } else {
    args.x = data + row0 * stride;
    args.x_stride = stride;
  }
}

PreparedRows prepare_rows(const float* x, int64_t x_stride, int64_t rows, const QuantizedMatrix& w) {
  PreparedRows p;
  const int64_t k = w.k;
  const int bits = w.bits;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(k, 1));
  if (quantized_integer_kernels(bits)) {
    const int64_t row_bytes = quantized_integer_row_bytes(k, w.group_size, bits);
    constexpr size_t kAlign = 64;
    p.quantized_buffer = std::make_unique_for_overwrite<uint8_t[]>(static_cast<size_t>(rows * row_bytes) + kAlign);
    const auto address = reinterpret_cast<uintptr_t>(p.quantized_buffer.get());
    uint8_t* out = p.quantized_buffer.get() + ((kAlign - address % kAlign) % kAlign);
    parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
      quantized_integer_prepare_x(x + begin * x_stride, x_stride, end - begin, k, w.group_size, bits,
                                  out + begin * row_bytes);
    });
    p.quantized = out;
    p.quantized_stride = row_bytes;
    return p;
  }
  if (!quantized_reorders_columns(bits)) {
    p.data = x;
    p.stride = x_stride;
    return p;
  }
  p.buffer.resize(static_cast<size_t>(rows * k));
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    quantized_prepare_x(x + begin * x_stride, x_stride, end - begin, k, bits, p.buffer.data() + begin * k);
  });
  p.data = p.buffer.data();
  p.stride = k;
  return p;
}

bool same_preparation(const QuantizedMatrix& a, const QuantizedMatrix& b) {
  const bool integer = quantized_integer_kernels(a.bits);
  if (integer != quantized_integer_kernels(b.bits)) return false;
  if (integer) return a.bits == b.bits && a.group_size == b.group_size && a.k == b.k;
  return quantized_reorders_columns(a.bits) == quantized_reorders_columns(b.bits);
}

LinearTiling quantized_linear_tiling(int64_t m, int64_t n) {
  LinearTiling t;
  t.m = m;
  t.n = n;
  if (m < kPanelMinRows) {
    t.m_block = std::max<int64_t>(m, 1);
    t.n_block = kDecodeRowsPerTask;
  } else {
    const int64_t m_blocks = (m + kMaxRowsPerTask - 1) / kMaxRowsPerTask;
    t.m_block = std::max<int64_t>(kPanelMinRows, ((m + m_blocks - 1) / m_blocks + 3) / 4 * 4);
    t.n_block = kPanelRowsPerTask;
  }
  return t;
}

void quantized_linear_threaded(const QuantizedLinearArgs& args, int64_t m, int64_t n) {
  if (m <= 0 || n <= 0) return;
  run_tiles(quantized_linear_tiling(m, n), args.w.k,
            [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) { quantized_linear_block(args, m0, m1, n0, n1); });
}

}  // namespace cpu

void quantized_linear(const Tensor& x, const QuantizedWeight& w, Tensor& out) {
  constexpr const char* kOp = "quantized_linear";
  const cpu::QuantizedMatrix wm = cpu::quantized_matrix(w, 2, kOp, "w");
  cpu::require_dtype(x, DType::kF32, kOp, "x");
  LMX_REQUIRE(InvalidArgument, x.ndim() >= 1 && x.dim(-1) == wm.k,
                           "quantized_linear: x {} does not match w (K = {})", shape_string(x.shape()), wm.k);
  const cpu::RowView xv = cpu::row_view(x, kOp, "x");
  const int64_t n = w.rows();
  Shape out_shape = x.shape();
  out_shape.back() = n;
  cpu::prepare_out(out, out_shape, DType::kF32, kOp);
  const cpu::PreparedRows xp = cpu::prepare_rows(xv.row<const float>(0), xv.stride, xv.rows, wm);
  cpu::QuantizedLinearArgs args;
  xp.bind(args, 0);
  args.w = wm;
  args.out = out.data<float>();
  args.out_stride = n;
  cpu::quantized_linear_threaded(args, xv.rows, n);
}

Tensor quantized_linear(const Tensor& x, const QuantizedWeight& w) {
  Tensor out;
  quantized_linear(x, w, out);
  return out;
}

void quantized_embedding(const QuantizedWeight& table, std::span<const int32_t> ids, float scale,
                         Tensor& out) {
  constexpr const char* kOp = "quantized_embedding";
  const cpu::QuantizedMatrix wm = cpu::quantized_matrix(table, 2, kOp, "table");
  const int64_t vocab = table.rows(), dim = wm.k;
  for (size_t t = 0; t < ids.size(); ++t)
    LMX_REQUIRE(InvalidArgument, ids[t] >= 0 && ids[t] < vocab,
                             "quantized_embedding: token id {} (at index {}) outside [0, {})", ids[t], t,
                             vocab);
  cpu::prepare_out(out, {static_cast<int64_t>(ids.size()), dim}, DType::kF32, kOp);
  float* o = out.data<float>();
  parallel_for(static_cast<int64_t>(ids.size()), std::max<int64_t>(1, 16384 / dim),
               [&](int64_t begin, int64_t end) {
                 for (int64_t t = begin; t < end; ++t)
                   cpu::quantized_dequantize_row(wm, ids[static_cast<size_t>(t)], scale, o + t * dim);
               });
}

}  // namespace lmx::ops
