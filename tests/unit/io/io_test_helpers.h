// Helpers for io tests: hand-built safetensors bytes, random tensors of any dtype, error matchers.
#pragma once

#include "lmx/core/error.h"
#include "lmx/core/tensor.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace lmx::test {

// A safetensors file image: 8-byte little-endian header length (`declared_length`, or the real
// length of `header`), the header text as is, then `data_bytes` bytes of a counting pattern.
inline std::string raw_safetensors(const std::string& header, size_t data_bytes,
                                   std::optional<uint64_t> declared_length = std::nullopt) {
  uint64_t length = declared_length.value_or(header.size());
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(length >> (8 * i)));
  out += header;
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<char>(i * 7 + 1));
  return out;
}

// A contiguous tensor of `dtype` with random contents (random floats for floating dtypes,
// random bytes for integer dtypes).
inline Tensor random_any_tensor(const Shape& shape, DType dtype) {
  if (is_floating(dtype)) return random_tensor(shape, dtype);
  Tensor t = Tensor::zeros(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng()());
  return t;
}

// Runs `fn` and expects it to throw E whose message contains every one of `substrings`.
template <typename E>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& substrings) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception mentioning '" << (substrings.empty() ? "" : substrings[0]) << "'";
  } catch (const E& e) {
    std::string what = e.what();
    for (const auto& s : substrings)
      EXPECT_NE(what.find(s), std::string::npos) << "'" << what << "' lacks '" << s << "'";
  }
}

}  // namespace lmx::test
