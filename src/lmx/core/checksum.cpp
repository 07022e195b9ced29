// checksum64: four lanes over 32-byte stripes, the tail in 8-, 4- and 1-byte steps, a final avalanche.
#include "lmx/core/checksum.h"

#include <cstring>

namespace lmx {

namespace {
constexpr uint64_t kP1 = 0x9e3779b185ebca87ULL, kP2 = 0xc2b2ae3d27d4eb4fULL, kP3 = 0x165667b19e3779f9ULL,
                   kP4 = 0x85ebca77c2b2ae63ULL, kP5 = 0x27d4eb2f165667c5ULL;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint64_t round(uint64_t acc, uint64_t lane) {
  return rotl(acc + lane * kP2, 31) * kP1;
}
uint64_t merge(uint64_t h, uint64_t lane) {
  return (h ^ round(0, lane)) * kP1 + kP4;
}
}  // namespace

uint64_t checksum64(const std::byte* data, size_t bytes, uint64_t seed) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  const unsigned char* end = p + bytes;
  uint64_t h;
  if (bytes >= 32) {
    uint64_t v1 = seed + kP1 + kP2, v2 = seed + kP2, v3 = seed, v4 = seed - kP1;
    for (; p + 32 <= end; p += 32) {
      v1 = round(v1, load64(p));
      v2 = round(v2, load64(p + 8));
      v3 = round(v3, load64(p + 16));
      v4 = round(v4, load64(p + 24));
    }
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(merge(merge(merge(h, v1), v2), v3), v4);
  } else {
    h = seed + kP5;
  }
  h += static_cast<uint64_t>(bytes);
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round(0, load64(p)), 27) * kP1 + kP4;
  if (p + 4 <= end) {
    uint32_t w;
    std::memcpy(&w, p, 4);
    h = rotl(h ^ (static_cast<uint64_t>(w) * kP1), 23) * kP2 + kP3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (*p * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string hex64(uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) out[static_cast<size_t>(i)] = digits[value & 15];
  return out;
}

}  // namespace lmx
