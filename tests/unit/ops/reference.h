// Slow, obvious double-precision references and comparison helpers for the ops tests.
#pragma once

#include "lmx/core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace lmx::test {

constexpr double kF32Eps = std::numeric_limits<float>::epsilon();

// All elements of a floating tensor (any strides) as doubles, row-major.
inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kF32 && t.is_contiguous()) {
    const float* p = t.data<float>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
    return v;
  }
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.item_f32(i);
  return v;
}

// True when the two f32 tensors hold the same bits element by element.
inline bool bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float x = a.item_f32(i), y = b.item_f32(i);
    if (std::memcmp(&x, &y, sizeof(float)) != 0) return false;
  }
  return true;
}

inline double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Expects |actual[i] - expected[i]| <= tol[i] for all i, reporting the first few failures.
inline void expect_close(const Tensor& actual, const std::vector<double>& expected,
                         const std::vector<double>& tol, const char* what) {
  ASSERT_EQ(actual.numel(), static_cast<int64_t>(expected.size())) << what;
  int failures = 0;
  for (int64_t i = 0; i < actual.numel() && failures < 5; ++i) {
    const double a = actual.item_f32(i), e = expected[static_cast<size_t>(i)],
                 t = tol[static_cast<size_t>(i)];
    if (!(std::fabs(a - e) <= t)) {
      ADD_FAILURE() << what << ": element " << i << " = " << a << ", expected " << e << " ± " << t;
      ++failures;
    }
  }
}

// Tolerance vector tol[i] = scale * (1 + |expected[i]|).
inline std::vector<double> relative_tol(const std::vector<double>& expected, double scale) {
  std::vector<double> tol(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) tol[i] = scale * (1.0 + std::fabs(expected[i]));
  return tol;
}

}  // namespace lmx::test
