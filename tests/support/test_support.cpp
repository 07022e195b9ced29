// Helpers shared by lmx tests: data paths, temporary directories, seeded random tensors.
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace lmx::test {

std::string source_path(const std::string& relative) {
  // LMX_SOURCE_DIR in the environment wins over the configure-time path (tests run from a copy of
  // the tree, e.g. on the GPU machine).
  const char* env = std::getenv("LMX_SOURCE_DIR");
  return std::string(env != nullptr && *env != '\0' ? env : LMX_SOURCE_DIR) + "/" + relative;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read test file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "lmx-test-XXXXXX").string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::mt19937_64& rng() {
  static thread_local std::mt19937_64 gen;
  static thread_local std::string seeded_for;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "";
  if (name != seeded_for) {
    seeded_for = name;
    const char* env = std::getenv("LMX_TEST_SEED");
    gen.seed(env ? std::strtoull(env, nullptr, 10) : std::hash<std::string>{}(name));
  }
  return gen;
}

std::vector<float> random_floats(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::mt19937_64 local(rng()());  // one draw from the per-test stream; cheap per element
  std::vector<float> v(n);
  for (auto& x : v) x = dist(local);
  return v;
}

Tensor random_tensor(const Shape& shape, DType dtype, float lo, float hi) {
  Tensor t = Tensor::from_vector(random_floats(static_cast<size_t>(shape_numel(shape)), lo, hi), shape);
  return dtype == DType::kF32 ? t : t.to(dtype);
}

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    float d = std::fabs(a.item_f32(i) - b.item_f32(i));
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace lmx::test
