// MLX affine codec reference: bit-stream packing, quantize (as mlx.core.quantize), dequantize, validation.
#include "lmx/quant/affine.h"

#include "lmx/core/thread_pool.h"

#include "lmx/core/half.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace lmx::quant {
namespace {

bool scale_dtype_ok(DType d) {
  return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16;
}

// Element i of a contiguous F32/BF16/F16 tensor, widened exactly to f32.
float load_f32(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kBF16:
      return bf16_to_f32(t.data_u16()[i]);
    case DType::kF16:
      return f16_to_f32(t.data_u16()[i]);
    default:
      return t.data<float>()[i];
  }
}

// Stores v rounded to nearest even into element i of a contiguous F32/BF16/F16 tensor.
void store_f32(Tensor& t, int64_t i, float v) {
  switch (t.dtype()) {
    case DType::kBF16:
      static_cast<uint16_t*>(t.raw_data())[i] = f32_to_bf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(t.raw_data())[i] = f32_to_f16(v);
      break;
    default:
      t.data<float>()[i] = v;
  }
}

Shape with_last_dim(Shape shape, int64_t last) {
  shape.back() = last;
  return shape;
}

}  // namespace

bool valid_affine_params(int bits, int group_size) {
  const bool bits_ok = bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8;
  const bool group_ok = group_size == 32 || group_size == 64 || group_size == 128;
  return bits_ok && group_ok;
}

void pack_row(std::span<const uint32_t> codes, int bits, std::span<uint32_t> words) {
  LMX_REQUIRE(InvalidArgument, bits >= 1 && bits <= 32, "pack_row: bits {} outside [1, 32]", bits);
  const uint64_t total_bits = static_cast<uint64_t>(codes.size()) * static_cast<uint64_t>(bits);
  LMX_REQUIRE(InvalidArgument, words.size() == (total_bits + 31) / 32,
                           "pack_row: {} codes of {} bits need {} words, got {}", codes.size(), bits,
                           (total_bits + 31) / 32, words.size());
  const uint64_t limit = uint64_t{1} << bits;
  std::fill(words.begin(), words.end(), 0u);
  for (size_t j = 0; j < codes.size(); ++j) {
    LMX_REQUIRE(InvalidArgument, codes[j] < limit, "pack_row: code {} at index {} does not fit in {} bits",
                             codes[j], j, bits);
    const uint64_t offset = static_cast<uint64_t>(j) * static_cast<uint64_t>(bits);
    const size_t word = static_cast<size_t>(offset / 32);
    const unsigned shift = static_cast<unsigned>(offset % 32);
    // The code's bits in a 64-bit window over words [word, word + 1].
    const uint64_t placed = static_cast<uint64_t>(codes[j]) << shift;
    words[word] |= static_cast<uint32_t>(placed);
    if (shift + static_cast<unsigned>(bits) > 32) words[word + 1] |= static_cast<uint32_t>(placed >> 32);
  }
}

uint32_t unpack_code(std::span<const uint32_t> words, int64_t index, int bits) {
  LMX_REQUIRE(InvalidArgument, bits >= 1 && bits <= 32, "unpack_code: bits {} outside [1, 32]", bits);
  LMX_REQUIRE(InvalidArgument, index >= 0 && (static_cast<uint64_t>(index) + 1) * static_cast<uint64_t>(bits) <=
                                             static_cast<uint64_t>(words.size()) * 32,
                           "unpack_code: code {} of {} bits lies past the end of {} words", index, bits,
                           words.size());
  const uint64_t offset = static_cast<uint64_t>(index) * static_cast<uint64_t>(bits);
  const size_t word = static_cast<size_t>(offset / 32);
  const unsigned shift = static_cast<unsigned>(offset % 32);
  uint64_t window = words[word];
  if (shift + static_cast<unsigned>(bits) > 32) window |= static_cast<uint64_t>(words[word + 1]) << 32;
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  return static_cast<uint32_t>((window >> shift) & mask);
}

AffineQuantized quantize_affine(const Tensor& w, int bits, int group_size, DType scale_dtype,
                                AffineRounding rounding) {
  LMX_REQUIRE(InvalidArgument, valid_affine_params(bits, group_size),
                           "quantize_affine: unsupported bits {} / group size {} (bits 2, 3, 4, 5, 6, 8; "
                           "groups 32, 64, 128)",
                           bits, group_size);
  LMX_REQUIRE(InvalidArgument, 
      w.defined() && (w.dtype() == DType::kF32 || w.dtype() == DType::kBF16 || w.dtype() == DType::kF16),
      "quantize_affine: w must be F32, BF16 or F16, got {}",
      w.defined() ? std::string(dtype_name(w.dtype())) : std::string("undefined"));
  LMX_REQUIRE(InvalidArgument, scale_dtype_ok(scale_dtype),
                           "quantize_affine: scale dtype {} is not F32, BF16 or F16",
                           dtype_name(scale_dtype));
  LMX_REQUIRE(InvalidArgument, 
      w.ndim() >= 1 && w.dim(-1) > 0 && w.dim(-1) % group_size == 0,
      "quantize_affine: last dim of w {} is not a positive multiple of the group size {}",
      shape_string(w.shape()), group_size);
  const Tensor src = w.contiguous();
  const int64_t k = src.dim(-1);
  const int64_t rows = src.numel() / k;
  const int64_t groups = k / group_size;
  const int64_t words = k * bits / 32;

  AffineQuantized q;
  q.bits = bits;
  q.group_size = group_size;
  q.codes = Tensor::zeros(with_last_dim(src.shape(), words), DType::kU32);
  q.scales = Tensor::zeros(with_last_dim(src.shape(), groups), scale_dtype);
  q.biases = Tensor::zeros(with_last_dim(src.shape(), groups), scale_dtype);

  const bool gpu = rounding == AffineRounding::kMlxGpu;
  auto round_mlx = [gpu](float v) { return gpu ? std::round(v) : std::rint(v); };
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  uint32_t* out_words = q.codes.data<uint32_t>();

  // Rows are independent: split over the thread pool (the result does not depend on the split).
  parallel_for(rows, std::max<int64_t>(1, 4096 / groups), [&](int64_t r0, int64_t r1) {
  std::vector<float> values(static_cast<size_t>(group_size));
  std::vector<uint32_t> codes(static_cast<size_t>(k));
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t base = r * k + g * group_size;
      // GPU kernels start the max at 0 (and the min at the dtype's largest value, which no finite
      // element exceeds); the CPU backend starts from ±infinity.
      float w_min = std::numeric_limits<float>::infinity();
      float w_max = gpu ? 0.0f : -std::numeric_limits<float>::infinity();
      for (int j = 0; j < group_size; ++j) {
        const float v = load_f32(src, base + j);
        LMX_REQUIRE(InvalidArgument, std::isfinite(v), "quantize_affine: element {} of w {} is not finite ({})",
                                 base + j, shape_string(w.shape()), v);
        values[static_cast<size_t>(j)] = v;
        w_min = std::min(w_min, v);
        w_max = std::max(w_max, v);
      }
      const bool side = std::fabs(w_min) > std::fabs(w_max);
      float scale = std::max((w_max - w_min) / n_bins, eps);
      scale = side ? scale : -scale;
      const float edge = side ? w_min : w_max;
      const float q0 = round_mlx(edge / scale);
      float bias = 0.0f;
      if (q0 != 0.0f) {
        scale = edge / q0;
        bias = edge;
      }
      for (int j = 0; j < group_size; ++j) {
        const float v = round_mlx((values[static_cast<size_t>(j)] - bias) / scale);
        // (w - bias) / scale is ≥ 0 by construction (bias is the edge on scale's side), up to -0.
        codes[static_cast<size_t>(g * group_size + j)] =
            v > 0.0f ? static_cast<uint32_t>(std::min(v, n_bins)) : 0u;
      }
      store_f32(q.scales, r * groups + g, scale);
      store_f32(q.biases, r * groups + g, bias);
    }
    pack_row(codes, bits, std::span<uint32_t>(out_words + r * words, static_cast<size_t>(words)));
  }
  });
  return q;
}

Tensor dequantize_affine(const AffineQuantized& q) {
  validate_affine(q.codes, q.scales, q.biases, q.bits, q.group_size, "dequantize_affine");
  const Tensor codes = q.codes.contiguous();
  const Tensor scales = q.scales.contiguous();
  const Tensor biases = q.biases.contiguous();
  const int64_t words = codes.dim(-1);
  const int64_t k = words * 32 / q.bits;
  const int64_t groups = k / q.group_size;
  const int64_t rows = codes.numel() / words;
  Tensor out = Tensor::zeros(with_last_dim(codes.shape(), k), DType::kF32);
  float* o = out.data<float>();
  const uint32_t* c = codes.data<uint32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const uint32_t> row(c + r * words, static_cast<size_t>(words));
    for (int64_t j = 0; j < k; ++j) {
      const int64_t g = r * groups + j / q.group_size;
      const float code = static_cast<float>(unpack_code(row, j, q.bits));
      o[r * k + j] = std::fma(load_f32(scales, g), code, load_f32(biases, g));
    }
  }
  return out;
}

bool finite_magnitudes_below(const Tensor& scales, float limit) {
  LMX_REQUIRE(InvalidArgument, scale_dtype_ok(scales.dtype()),
              "finite_magnitudes_below: dtype {} is not F32, BF16 or F16", dtype_name(scales.dtype()));
  // (Runs over every scale of a checkpoint at upload: no copy when contiguous, one loop per dtype.)
  const Tensor t = scales.is_contiguous() ? scales : scales.contiguous();
  const auto below = [&](auto widen, const auto* data) {
    for (int64_t i = 0, n = t.numel(); i < n; ++i) {
      const float v = std::fabs(widen(data[i]));
      if (std::isfinite(v) && !(v < limit)) return false;
    }
    return true;
  };
  switch (t.dtype()) {
    case DType::kBF16: return below(bf16_to_f32, t.data_u16());
    case DType::kF16: return below(f16_to_f32, t.data_u16());
    default: return below([](float v) { return v; }, t.data<float>());
  }
}

void validate_affine(const Tensor& codes, const Tensor& scales, const Tensor& biases, int bits,
                     int group_size, const std::string& what) {
  LMX_REQUIRE(FormatError, 
      valid_affine_params(bits, group_size),
      "{}: unsupported quantization bits {} / group size {} (bits 2, 3, 4, 5, 6, 8; groups 32, "
      "64, 128)",
      what, bits, group_size);
  LMX_REQUIRE(FormatError, codes.defined() && scales.defined() && biases.defined(),
                       "{}: quantized weight needs codes, scales and biases ({} missing)", what,
                       !codes.defined()    ? "codes"
                       : !scales.defined() ? "scales"
                                           : "biases");
  LMX_REQUIRE(FormatError, codes.dtype() == DType::kU32, "{}: codes have dtype {}, expected U32", what,
                       dtype_name(codes.dtype()));
  LMX_REQUIRE(FormatError, scale_dtype_ok(scales.dtype()) && biases.dtype() == scales.dtype(),
                       "{}: scales ({}) and biases ({}) must share one dtype of F32, BF16 or F16", what,
                       dtype_name(scales.dtype()), dtype_name(biases.dtype()));
  LMX_REQUIRE(FormatError, codes.ndim() >= 1 && codes.dim(-1) > 0 && codes.dim(-1) * 32 % bits == 0,
                       "{}: codes {} do not hold whole {}-bit rows", what, shape_string(codes.shape()), bits);
  const int64_t k = codes.dim(-1) * 32 / bits;
  LMX_REQUIRE(FormatError, k % group_size == 0, "{}: codes {} give K = {}, not a multiple of the group size {}",
                       what, shape_string(codes.shape()), k, group_size);
  const Shape expected = with_last_dim(codes.shape(), k / group_size);
  LMX_REQUIRE(FormatError, scales.shape() == expected, "{}: scales {} do not match codes {} (expected {})", what,
                       shape_string(scales.shape()), shape_string(codes.shape()), shape_string(expected));
  LMX_REQUIRE(FormatError, biases.shape() == expected, "{}: biases {} do not match codes {} (expected {})", what,
                       shape_string(biases.shape()), shape_string(codes.shape()), shape_string(expected));
}

}  // namespace lmx::quant
