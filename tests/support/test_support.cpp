// Helpers shared by lmx tests: data paths, temporary directories, seeded random tensors.
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

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

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write test file " + path);
}

namespace {
// Throws std::runtime_error "<what> <path>: <reason>" when `ec` holds an error.
void check(const std::error_code& ec, const char* what, const std::string& path) {
  if (ec) throw std::runtime_error(std::string(what) + " " + path + ": " + ec.message());
}
}  // namespace

bool exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

void copy_path(const std::string& from, const std::string& to) {
  std::error_code ec;
  std::filesystem::copy(
      from, to, std::filesystem::copy_options::recursive | std::filesystem::copy_options::overwrite_existing,
      ec);
  check(ec, "cannot copy", from + " to " + to);
}

uint64_t file_size(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  check(ec, "cannot stat", path);
  return size;
}

void resize_file(const std::string& path, uint64_t size) {
  std::error_code ec;
  std::filesystem::resize_file(path, size, ec);
  check(ec, "cannot resize", path);
}

void remove_path(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  check(ec, "cannot remove", path);
}

size_t count_entries(const std::string& dir) {
  std::error_code ec;
  size_t count = 0;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) ++count;
  check(ec, "cannot list", dir);
  return count;
}

TempDir::TempDir() {
  std::error_code ec;
  std::filesystem::path temp = std::filesystem::temp_directory_path(ec);
  if (ec) temp = "/tmp";
  std::string pattern = (temp / "lmx-test-XXXXXX").string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

void TempDir::allow_other_users() const {
  if (::chmod(path_.c_str(), 0755) != 0) throw std::runtime_error("cannot chmod " + path_);
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
