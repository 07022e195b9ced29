// KV codecs: how one cache layer stores a token's keys and values. A codec has a stable name that
// enters every cache signature, and a byte count per token; attention kernels read its layout directly.
#pragma once

#include "lmx/core/dtype.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmx {

// - kF32, kBf16: K and V as [tokens, heads, head_dim] arrays of one element type: f32 (the exactness
//   reference on every backend) or bf16 (round to nearest even from the f32 the model computes).
// - kAffine: MLX affine quantization along head_dim (mlx-lm's QuantizedKVCache): groups of `group`
//   elements share a bf16 scale and bias, each element a `bits`-bit code; quantized from the f32 the model
//   computes exactly as mlx.core.quantize's GPU kernels round (lmx/quant/affine.h). A block's keys (and
//   likewise its values) are the codes [block_tokens, heads, head_dim · bits / 32] u32, then the scales
//   [block_tokens, heads, head_dim / group] bf16, then the biases of the same shape (ops/paged_kv.h).
// - kTurbo: TurboQuant (lmx/quant/turbo.h): `bits`-bit keys (4 or 8) affine per block of 32, values
//   rotated by a random-sign Walsh–Hadamard transform and quantized to `value_bits` (2, 3 or 4) with a
//   Lloyd–Max codebook; head_dim a power of two. A block's keys are rows of turbo_key_bytes per token-head,
//   its values rows of turbo_value_bytes.
enum class KvCodecKind : uint8_t { kF32, kBf16, kAffine, kTurbo };

class KvCodec {
 public:
  constexpr KvCodec() = default;
  constexpr explicit KvCodec(KvCodecKind kind) : kind_(kind) {}
  // An affine codec; InvalidArgument unless bits is 4 or 8 and group 32, 64 or 128.
  static KvCodec affine(int bits, int group);
  // A TurboQuant codec; InvalidArgument unless key_bits is 4 or 8 and value_bits 2, 3 or 4.
  static KvCodec turbo(int key_bits, int value_bits);

  // Parses a --kv-cache spec: "f32", "bf16", "affine4", "affine8" (groups of 64), "affine4:g32",
  // "affine8:g128", "turbo" (k8v3), "turbo:k8v4", "turbo:k4v3", …; InvalidArgument listing the known
  // specs otherwise.
  static KvCodec parse(std::string_view spec);

  KvCodecKind kind() const { return kind_; }
  bool quantized() const { return kind_ == KvCodecKind::kAffine || kind_ == KvCodecKind::kTurbo; }
  int bits() const { return bits_; }              // affine, and TurboQuant's keys: 4 or 8; else 0
  int value_bits() const { return value_bits_; }  // TurboQuant: 2, 3 or 4; else 0
  int group() const { return group_; }            // affine: 32, 64 or 128; else 0
  // "f32", "bf16", "affine4:g64", "turbo:k8v3": the spec that parse() takes back, and the codec's part of a
  // signature.
  std::string name() const;
  // The element type of the plain codecs' K and V arrays; of the scales and biases of the affine ones.
  DType element_dtype() const;
  // Bytes of one token's keys (values: its values) of `heads` heads of `head_dim`. InvalidArgument when an
  // affine codec's group does not divide head_dim, or TurboQuant's head_dim is not a power of two ≥ 32.
  size_t token_bytes(int heads, int head_dim, bool values = false) const;

  friend bool operator==(const KvCodec&, const KvCodec&) = default;

 private:
  KvCodecKind kind_ = KvCodecKind::kF32;
  uint8_t bits_ = 0;
  uint8_t group_ = 0;
  uint8_t value_bits_ = 0;
};

}  // namespace lmx
