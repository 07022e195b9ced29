// KV codecs: names, parsing and byte counts.
#include "lmx/kv/kv_codec.h"

#include "lmx/core/error.h"

namespace lmx {

KvCodec KvCodec::parse(std::string_view spec) {
  if (spec == "f32") return KvCodec(KvCodecKind::kF32);
  if (spec == "bf16") return KvCodec(KvCodecKind::kBf16);
  throw InvalidArgument(fmt::format("unknown KV cache codec '{}': expected f32 or bf16", spec));
}

std::string_view KvCodec::name() const {
  return kind_ == KvCodecKind::kF32 ? "f32" : "bf16";
}

DType KvCodec::element_dtype() const {
  return kind_ == KvCodecKind::kF32 ? DType::kF32 : DType::kBF16;
}

size_t KvCodec::token_bytes(int heads, int head_dim) const {
  return static_cast<size_t>(heads) * static_cast<size_t>(head_dim) * dtype_size(element_dtype());
}

}  // namespace lmx
