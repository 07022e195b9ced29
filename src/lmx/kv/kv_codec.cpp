// KV codecs: names, parsing and byte counts.
#include "lmx/kv/kv_codec.h"

#include "lmx/core/error.h"

#include <charconv>

namespace lmx {
namespace {

constexpr const char* kKnownSpecs = "f32, bf16, affine4, affine8 (optionally :g32, :g64 or :g128)";

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

KvCodec KvCodec::parse(std::string_view spec) {
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
  }
  return "f32";
}

DType KvCodec::element_dtype() const {
  return kind_ == KvCodecKind::kF32 ? DType::kF32 : DType::kBF16;
}

size_t KvCodec::token_bytes(int heads, int head_dim) const {
  const auto h = static_cast<size_t>(heads), d = static_cast<size_t>(head_dim);
  if (kind_ != KvCodecKind::kAffine) return h * d * dtype_size(element_dtype());
  LMX_REQUIRE(InvalidArgument, head_dim % group_ == 0,
              "KV codec {}: head_dim {} is not a multiple of the group {}", name(), head_dim, group_);
  // Codes, then a bf16 scale and bias per group.
  return h * (d * bits_ / 8 + 2 * (d / group_) * 2);
}

}  // namespace lmx
