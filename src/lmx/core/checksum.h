// checksum64: a fast 64-bit checksum of a byte range (four 64-bit lanes of multiply-rotate, then an
// avalanche), for detecting corrupted or truncated files. Not cryptographic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lmx {

uint64_t checksum64(const std::byte* data, size_t bytes, uint64_t seed = 0);
inline uint64_t checksum64(std::string_view bytes, uint64_t seed = 0) {
  return checksum64(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), seed);
}
// 16 lowercase hex digits.
std::string hex64(uint64_t value);

}  // namespace lmx
