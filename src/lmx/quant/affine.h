// MLX affine quantization (mode "affine"): the reference codec — bit-stream packing, quantize exactly as
// mlx.core.quantize, dequantize, and validation of stored (codes, scales, biases) triples. Slow and
// obvious on purpose: it is the oracle the fast kernels (ops/quantized.h) are tested against.
//
// Layout (MLX's affine layout): a weight w [..., K] is split along its last dim into groups of
// `group_size` consecutive elements. Each group g has a scale s and a bias b; element k stores a code
// q ∈ [0, 2^bits) and stands for w ≈ s * q + b. Codes of one row form a little-endian bit stream in
// uint32 words: element j occupies bits [j*bits, j*bits + bits) of the row's stream (bit i of the
// stream is bit i % 32 of word i / 32), so 3-, 5- and 6-bit codes may straddle two words. A row of K
// elements has K*bits/32 words; since group_size ≥ 32, every group starts on a word boundary.
#pragma once

#include "lmx/core/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace lmx::quant {

struct AffineQuantized {
  Tensor codes;   // U32 [..., K*bits/32]: the rows' bit streams
  Tensor scales;  // [..., K/group_size] in the scale dtype (F32, BF16 or F16)
  Tensor biases;  // [..., K/group_size], same dtype and shape as scales
  int bits = 0, group_size = 0;
};

// bits ∈ {2, 3, 4, 5, 6, 8} and group_size ∈ {32, 64, 128} (the combinations MLX supports).
bool valid_affine_params(int bits, int group_size);

// Which MLX backend's quantizer to replicate. They differ in two places:
// - kMlxGpu (Metal and CUDA kernels; what mlx-community checkpoints and mlx_lm.convert on a Mac
//   produce): a group's max starts at 0 — so an all-negative group quantizes the range [min, 0] — and
//   rounding is half away from zero (metal::round / CUDA round).
// - kMlxCpu (MLX's CPU backend): min and max are the group's true extremes; rounding is half to even
//   (std::rint).
enum class AffineRounding { kMlxGpu, kMlxCpu };

// Quantizes w (F32/BF16/F16, any leading dims, last dim K a positive multiple of group_size) as
// mlx.core.quantize(w, group_size, bits) does, per group, in f32 (eps = 1e-7, n_bins = 2^bits - 1):
//   scale = max((max - min) / n_bins, eps); side = |min| > |max|
//   scale = side ? scale : -scale;  edge = side ? min : max;  q0 = round(edge / scale)
//   if q0 != 0 { scale = edge / q0; bias = edge } else { bias = 0 }
//   q = clamp(round((w - bias) / scale), 0, n_bins)        (with the f32 scale and bias)
// then stores scale and bias rounded (to nearest even) to scale_dtype (F32, BF16 or F16; MLX stores
// them in w's dtype). Consequences, as in MLX: the edge (the larger-magnitude extreme) is the bias, code
// 0; elements are within half a step of their dequantized value except at the clamped far end, which
// the snap of the zero point (scale = edge / q0) can leave up to one step away; a group whose values
// are all below eps/2 in magnitude dequantizes to 0. InvalidArgument for bad bits/group/K/dtypes and
// for non-finite elements of w.
AffineQuantized quantize_affine(const Tensor& w, int bits, int group_size, DType scale_dtype,
                                AffineRounding rounding = AffineRounding::kMlxGpu);

// f32 tensor of the quantized shape [..., K]: w = fma(scale, q, bias) (one f32 rounding) with scale
// and bias widened exactly from their dtype. These are exactly the weights the ops/quantized.h kernels
// compute with. FormatError (validate_affine) when the triple is inconsistent.
Tensor dequantize_affine(const AffineQuantized& q);

// Whether every finite element of `scales` (F32, BF16 or F16; any shape) is below `limit` in magnitude;
// NaN and ±inf are not counted. The CUDA backend asks it of a weight's scales at upload: below 2^-5, 4-bit
// codes with bf16 scales dequantize in fewer instructions to the same bits (cuda::kSmallScaleLimit).
// InvalidArgument for another dtype.
bool finite_magnitudes_below(const Tensor& scales, float limit);

// Packs one row of codes (each < 2^bits) into its bit stream; words.size() must be
// ceil(codes.size() * bits / 32). Bits past the last code are zero. InvalidArgument otherwise.
void pack_row(std::span<const uint32_t> codes, int bits, std::span<uint32_t> words);
// Code `index` of a row's bit stream (reads across a word boundary when the code straddles one).
// InvalidArgument when the code lies past the end of `words` or bits is outside [1, 32].
uint32_t unpack_code(std::span<const uint32_t> words, int64_t index, int bits);

// Checks a stored triple: valid bits/group; codes U32 with ≥ 1 dim and a last dim D with D*32 a
// multiple of bits, giving K = D*32/bits, a positive multiple of group_size; scales and biases F32,
// BF16 or F16 (the same dtype), both of codes' shape with the last dim K/group_size. Throws a
// FormatError whose message starts with `what` (e.g. the tensor name) and names the tensor and shapes.
void validate_affine(const Tensor& codes, const Tensor& scales, const Tensor& biases, int bits,
                     int group_size, const std::string& what);

}  // namespace lmx::quant
