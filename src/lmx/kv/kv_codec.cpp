// KV codecs: names, parsing and byte counts.
#include "lmx/kv/kv_codec.h"

#include "lmx/core/error.h"
#include "lmx/quant/turbo.h"

#include <charconv>

namespace lmx {
namespace {

constexpr const char* kKnownSpecs =
    "f32, bf16, affine4, affine8 (optionally :g32, :g64 or :g128), turbo (k8v3), turbo:kKvV (K 4 or 8, V 2, "
    "3 or "
    "4)";

int parse_int(std::string_view text) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty() ? value : -1;
}

}  // namespace

KvCodec KvCodec::affine(int bits, int group) {
  LMX_REQUIRE(InvalidArgument, bits == 4 || bits == 8, "affine KV codec: bits must be 4 or 8, got {}", bits);
  LMX_REQUIRE(InvalidArgument, group == 32 || group == 64 || group == 128,
              "affine KV codec: the group must be 32, 64 or 128, got {}", group);
  KvCodec codec(KvCodecKind::kAffine);
  codec.bits_ = static_cast<uint8_t>(bits);
  codec.group_ = static_cast<uint8_t>(group);
  return codec;
}

KvCodec KvCodec::turbo(int key_bits, int value_bits) {
  LMX_REQUIRE(InvalidArgument, key_bits == 4 || key_bits == 8,
              "TurboQuant KV codec: key bits must be 4 or 8, got {}", key_bits);
  LMX_REQUIRE(InvalidArgument, value_bits >= 2 && value_bits <= 4,
              "TurboQuant KV codec: value bits must be 2, 3 or 4, got {}", value_bits);
  KvCodec codec(KvCodecKind::kTurbo);
  codec.bits_ = static_cast<uint8_t>(key_bits);
  codec.value_bits_ = static_cast<uint8_t>(value_bits);
  return codec;
}

KvCodec KvCodec::parse(std::string_view spec) {
  if (spec == "turbo") return turbo(8, 3);
  if (spec.starts_with("turbo:k") && spec.size() == 10 && spec[8] == 'v') {
    const int k = parse_int(spec.substr(7, 1)), v = parse_int(spec.substr(9, 1));
    if ((k == 4 || k == 8) && v >= 2 && v <= 4) return turbo(k, v);
  }
  if (spec == "f32") return KvCodec(KvCodecKind::kF32);
  if (spec == "bf16") return KvCodec(KvCodecKind::kBf16);
  if (spec.starts_with("affine")) {
    std::string_view rest = spec.substr(6);
    int group = 64;
    if (const size_t colon = rest.find(':'); colon != std::string_view::npos) {
      const std::string_view g = rest.substr(colon + 1);
      group = g.starts_with("g") ? parse_int(g.substr(1)) : -1;
      rest = rest.substr(0, colon);
    }
    const int bits = parse_int(rest);
    if ((bits == 4 || bits == 8) && (group == 32 || group == 64 || group == 128)) return affine(bits, group);
  }
  throw InvalidArgument(fmt::format("unknown KV cache codec '{}': expected {}", spec, kKnownSpecs));
}

std::string KvCodec::name() const {
  switch (kind_) {
    case KvCodecKind::kF32:
      return "f32";
    case KvCodecKind::kBf16:
      return "bf16";
    case KvCodecKind::kAffine:
      return fmt::format("affine{}:g{}", bits_, group_);
    case KvCodecKind::kTurbo:
      return fmt::format("turbo:k{}v{}", bits_, value_bits_);
  }
  return "f32";
}

DType KvCodec::element_dtype() const {
  return kind_ == KvCodecKind::kF32 ? DType::kF32 : DType::kBF16;
}

size_t KvCodec::token_bytes(int heads, int head_dim, bool values) const {
  const auto h = static_cast<size_t>(heads), d = static_cast<size_t>(head_dim);
  if (kind_ == KvCodecKind::kTurbo) {
    LMX_REQUIRE(InvalidArgument, quant::turbo_head_dim_ok(head_dim),
                "KV codec {}: head_dim {} is not a power of two of at least 32", name(), head_dim);
    return h * (values ? quant::turbo_value_bytes(head_dim, value_bits_)
                       : quant::turbo_key_bytes(head_dim, bits_));
  }
  if (kind_ != KvCodecKind::kAffine) return h * d * dtype_size(element_dtype());
  LMX_REQUIRE(InvalidArgument, head_dim % group_ == 0,
              "KV codec {}: head_dim {} is not a multiple of the group {}", name(), head_dim, group_);
  // Codes, then a bf16 scale and bias per group.
  return h * (d * bits_ / 8 + 2 * (d / group_) * 2);
}

}  // namespace lmx
