// KV codecs: how one cache layer stores a token's keys and values. A codec has a stable name that
// enters every cache signature, and a byte count per token; attention kernels read its layout directly.
#pragma once

#include "lmx/core/dtype.h"

#include <cstddef>
#include <string>
#include <string_view>

namespace lmx {

// The plain codecs store K and V as [tokens, heads, head_dim] arrays of one element type: f32 (the
// exactness reference on every backend) or bf16 (round to nearest even from the f32 the model computes).
// Quantized codecs (affine, TurboQuant) add their own layouts behind the same names and byte counts.
enum class KvCodecKind : uint8_t { kF32, kBf16 };

class KvCodec {
 public:
  constexpr KvCodec() = default;
  constexpr explicit KvCodec(KvCodecKind kind) : kind_(kind) {}

  // Parses a --kv-cache spec ("f32", "bf16"); InvalidArgument listing the known specs otherwise.
  static KvCodec parse(std::string_view spec);

  KvCodecKind kind() const { return kind_; }
  // "f32", "bf16": the spec that parse() takes back, and the codec's part of a signature.
  std::string_view name() const;
  // The element type of the plain codecs' K and V arrays.
  DType element_dtype() const;
  // Bytes of one token's keys (or values) of `heads` heads of `head_dim`.
  size_t token_bytes(int heads, int head_dim) const;

  friend bool operator==(const KvCodec&, const KvCodec&) = default;

 private:
  KvCodecKind kind_ = KvCodecKind::kF32;
};

}  // namespace lmx
