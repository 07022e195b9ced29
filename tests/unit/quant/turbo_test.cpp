// The TurboQuant row codec (lmx/quant/turbo.h) against a reference written from the codec's description:
// packed bytes, scales, zeros, σ and decoded values bit for bit; the rotation orthonormal and its own
// inverse; the guards (constant and zero blocks decode exactly, zeros fit f16); reconstruction error within
// what the codebook promises.
#include "lmx/quant/turbo.h"
#include "lmx/core/half.h"
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace lmx {
namespace {

using quant::kTurboBlock;

// Recursive Walsh–Hadamard: H(x) = [H(a) + H(b), H(a) − H(b)] for the halves a, b; then ·1/sqrt(d).
void reference_hadamard(std::vector<float>& x, size_t begin, size_t n) {
  if (n == 1) return;
  reference_hadamard(x, begin, n / 2);
  reference_hadamard(x, begin + n / 2, n / 2);
  for (size_t i = begin; i < begin + n / 2; ++i) {
    const float a = x[i], b = x[i + n / 2];
    x[i] = a + b;
    x[i + n / 2] = a - b;
  }
}

std::vector<float> reference_rotate(std::vector<float> x) {
  for (size_t i = 0; i < x.size(); ++i) x[i] *= quant::turbo_sign(static_cast<int>(i));
  reference_hadamard(x, 0, x.size());
  const float norm = 1.0f / std::sqrt(static_cast<float>(x.size()));
  for (float& v : x) v *= norm;
  return x;
}

struct BitWriter {
  std::vector<std::byte>& out;
  size_t bit = 0;
  void put(uint32_t code, int bits) {
    for (int b = 0; b < bits; ++b, ++bit)
      if (code >> b & 1u) out[bit / 8] |= std::byte{static_cast<uint8_t>(1u << (bit % 8))};
  }
};

void put16(std::vector<std::byte>& out, size_t at, uint16_t v) {
  std::memcpy(out.data() + at, &v, 2);
}

// Code `index` of a stream of `bits`-bit codes, read bit by bit (least significant first).
uint32_t reference_code(const std::vector<std::byte>& stream, size_t index, int bits) {
  uint32_t code = 0;
  for (int b = 0; b < bits; ++b) {
    const size_t bit = index * static_cast<size_t>(bits) + static_cast<size_t>(b);
    code |= static_cast<uint32_t>(std::to_integer<uint8_t>(stream[bit / 8]) >> (bit % 8) & 1u) << b;
  }
  return code;
}

std::vector<std::byte> reference_key(const std::vector<float>& x, int bits) {
  const size_t d = x.size(), code_bytes = d * static_cast<size_t>(bits) / 8;
  std::vector<std::byte> out(code_bytes + d / kTurboBlock * 4, std::byte{0});
  BitWriter w{out};
  for (size_t b = 0; b < d / kTurboBlock; ++b) {
    const float* v = x.data() + b * kTurboBlock;
    const float lo = *std::min_element(v, v + kTurboBlock), hi = *std::max_element(v, v + kTurboBlock);
    float scale = bits == 8 ? std::max((hi - lo) / 254.0f, std::fabs(hi + lo) / 4096.0f)
                            : std::max((hi - lo) / 15.0f, std::fabs(lo) / 2048.0f);
    if (scale == 0.0f) scale = 1.0f;
    scale = f16_to_f32(f32_to_f16(scale));
    const float zero = bits == 8 ? std::round((hi + lo) / (2.0f * scale)) : std::round(lo / scale);
    for (int j = 0; j < kTurboBlock; ++j) {
      float q = std::round(v[j] / scale - zero);
      q = bits == 8 ? std::clamp(q, -127.0f, 127.0f) : std::clamp(q, 0.0f, 15.0f);
      w.put(static_cast<uint32_t>(static_cast<int32_t>(q)) & ((1u << bits) - 1u), bits);
    }
    put16(out, code_bytes + b * 4, f32_to_f16(scale));
    put16(out, code_bytes + b * 4 + 2, f32_to_f16(zero));
  }
  return out;
}

std::vector<std::byte> reference_value(const std::vector<float>& x, int bits) {
  const std::vector<float> y = reference_rotate(x);
  const size_t d = x.size(), code_bytes = d * static_cast<size_t>(bits) / 8;
  std::vector<std::byte> out(code_bytes + d / kTurboBlock * 2, std::byte{0});
  BitWriter w{out};
  const auto c = quant::turbo_centroids(bits);
  for (size_t b = 0; b < d / kTurboBlock; ++b) {
    float squares = 0.0f;
    for (int j = 0; j < kTurboBlock; ++j) squares += y[b * kTurboBlock + j] * y[b * kTurboBlock + j];
    const float sigma = f16_to_f32(f32_to_f16(std::sqrt(squares / kTurboBlock)));
    for (int j = 0; j < kTurboBlock; ++j) {
      const float t = sigma > 0.0f ? y[b * kTurboBlock + j] / sigma : 0.0f;
      uint32_t cell = 0;  // nearest centroid: boundaries at the midpoints
      for (size_t k = 1; k < c.size(); ++k)
        if (t > (c[k - 1] + c[k]) * 0.5f) cell = static_cast<uint32_t>(k);
      w.put(cell, bits);
    }
    put16(out, code_bytes + b * 2, f32_to_f16(sigma));
  }
  return out;
}

std::vector<std::vector<float>> rows(int d) {
  std::vector<std::vector<float>> r;
  for (int i = 0; i < 10; ++i) r.push_back(test::random_floats(static_cast<size_t>(d), -4.0f, 4.0f));
  r.push_back(std::vector<float>(static_cast<size_t>(d), 0.0f));
  r.push_back(std::vector<float>(static_cast<size_t>(d), -2.5f));
  r.push_back(test::random_floats(static_cast<size_t>(d), 1000.0f, 1000.01f));  // tiny spread, large mean
  r.push_back(test::random_floats(static_cast<size_t>(d), -1e-3f, 1e-3f));
  return r;
}

TEST(Turbo, KeysMatchTheReferenceBitForBit) {
  for (int d : {32, 64, 256})
    for (int bits : {4, 8})
      for (const auto& x : rows(d)) {
        std::vector<std::byte> out(quant::turbo_key_bytes(d, bits));
        quant::turbo_quantize_key(x.data(), d, bits, out.data());
        ASSERT_EQ(out, reference_key(x, bits)) << "d " << d << " bits " << bits;
        std::vector<float> back(static_cast<size_t>(d)), portable(static_cast<size_t>(d));
        quant::turbo_dequantize_key(out.data(), d, bits, back.data());
        quant::turbo_dequantize_key_portable(out.data(), d, bits, portable.data());
        // Decoded: (code + zero) · scale, the code signed for 8 bits; both paths.
        for (int i = 0; i < d; ++i) {
          uint16_t scale_bits, zero_bits;
          std::memcpy(&scale_bits, out.data() + d * bits / 8 + i / kTurboBlock * 4, 2);
          std::memcpy(&zero_bits, out.data() + d * bits / 8 + i / kTurboBlock * 4 + 2, 2);
          const uint32_t code = reference_code(out, static_cast<size_t>(i), bits);
          const int idx = bits == 8 ? static_cast<int8_t>(code) : static_cast<int>(code);
          const float want = (static_cast<float>(idx) + f16_to_f32(zero_bits)) * f16_to_f32(scale_bits);
          ASSERT_EQ(back[static_cast<size_t>(i)], want) << "d " << d << " bits " << bits << " element " << i;
          ASSERT_EQ(portable[static_cast<size_t>(i)], want) << "portable, d " << d << " bits " << bits;
        }
        // Within half a step of the f16 scale inside the range; the extremes may clamp by up to one step more
        // (the zero is rounded to an integer and the scale to f16).
        for (int b = 0; b < d / kTurboBlock; ++b) {
          uint16_t scale_bits;
          std::memcpy(&scale_bits, out.data() + d * bits / 8 + b * 4, 2);
          const float step = f16_to_f32(scale_bits);
          for (int j = b * kTurboBlock; j < (b + 1) * kTurboBlock; ++j)
            EXPECT_LE(std::fabs(back[static_cast<size_t>(j)] - x[static_cast<size_t>(j)]),
                      1.2f * step + 1e-6f)
                << "d " << d << " bits " << bits << " element " << j;
        }
      }
}

TEST(Turbo, ConstantBlocksDecodeExactly) {
  for (int bits : {4, 8})
    for (float c : {0.0f, -2.5f, 3.0f, 1000.0f}) {
      std::vector<float> x(64, c), back(64);
      std::vector<std::byte> out(quant::turbo_key_bytes(64, bits));
      quant::turbo_quantize_key(x.data(), 64, bits, out.data());
      quant::turbo_dequantize_key(out.data(), 64, bits, back.data());
      for (float v : back) EXPECT_NEAR(v, c, std::fabs(c) * 1e-3f) << "bits " << bits << " c " << c;
    }
}

TEST(Turbo, ValuesMatchTheReferenceBitForBit) {
  for (int d : {32, 64, 256})
    for (int bits : {2, 3, 4})
      for (const auto& x : rows(d)) {
        std::vector<std::byte> out(quant::turbo_value_bytes(d, bits));
        quant::turbo_quantize_value(x.data(), d, bits, out.data());
        ASSERT_EQ(out, reference_value(x, bits)) << "d " << d << " bits " << bits;
        // Decoded (still rotated): each element its code's centroid times its block's σ.
        std::vector<float> back(static_cast<size_t>(d)), portable(static_cast<size_t>(d));
        quant::turbo_dequantize_value_rotated(out.data(), d, bits, back.data());
        quant::turbo_dequantize_value_rotated_portable(out.data(), d, bits, portable.data());
        const auto c = quant::turbo_centroids(bits);
        for (int i = 0; i < d; ++i) {
          uint16_t sigma_bits;
          std::memcpy(&sigma_bits, out.data() + d * bits / 8 + i / kTurboBlock * 2, 2);
          const float want = c[reference_code(out, static_cast<size_t>(i), bits)] * f16_to_f32(sigma_bits);
          ASSERT_EQ(back[static_cast<size_t>(i)], want) << "d " << d << " bits " << bits << " element " << i;
          ASSERT_EQ(portable[static_cast<size_t>(i)], want) << "portable, d " << d << " bits " << bits;
        }
      }
}

TEST(Turbo, RotationIsOrthonormalAndItsOwnInverse) {
  for (int d : {32, 128, 512}) {
    const std::vector<float> x = test::random_floats(static_cast<size_t>(d));
    std::vector<float> y = x;
    quant::turbo_rotate(y.data(), d);
    EXPECT_EQ(y, reference_rotate(x));
    double nx = 0, ny = 0;
    for (int i = 0; i < d; ++i) {
      nx += x[static_cast<size_t>(i)] * x[static_cast<size_t>(i)];
      ny += y[static_cast<size_t>(i)] * y[static_cast<size_t>(i)];
    }
    EXPECT_NEAR(nx, ny, 1e-4 * nx);
    quant::turbo_unrotate(y.data(), d);
    for (int i = 0; i < d; ++i) EXPECT_NEAR(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)], 1e-5f);
  }
}

// The decoded values' relative MSE on Gaussian-like rows stays near the Lloyd–Max figures (2 bits 0.118,
// 3 bits 0.035, 4 bits 0.0095), with slack for the per-block σ.
TEST(Turbo, ValueErrorFollowsTheCodebook) {
  const double bound[5] = {0, 0, 0.16, 0.05, 0.016};
  for (int bits : {2, 3, 4}) {
    double err = 0, norm = 0;
    for (int r = 0; r < 200; ++r) {
      const std::vector<float> x = test::random_floats(128, -1.0f, 1.0f);
      std::vector<std::byte> out(quant::turbo_value_bytes(128, bits));
      quant::turbo_quantize_value(x.data(), 128, bits, out.data());
      std::vector<float> back(128);
      quant::turbo_dequantize_value_rotated(out.data(), 128, bits, back.data());
      quant::turbo_unrotate(back.data(), 128);
      for (int i = 0; i < 128; ++i) {
        err += std::pow(back[static_cast<size_t>(i)] - x[static_cast<size_t>(i)], 2);
        norm += std::pow(x[static_cast<size_t>(i)], 2);
      }
    }
    EXPECT_LT(err / norm, bound[bits]) << bits << " bits";
  }
}

}  // namespace
}  // namespace lmx
