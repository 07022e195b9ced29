// Helpers shared by lmx tests: data paths, temporary directories, seeded random tensors.
#pragma once

#include "lmx/core/tensor.h"

#include <cctype>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace lmx::test {

// Absolute path of a file under the source tree (e.g. "tests/data/models/tiny-e2b").
std::string source_path(const std::string& relative);

// The bytes of a test data file; throws std::runtime_error naming it when it cannot be read.
std::string read_file(const std::string& path);
// Creates or replaces a file with `bytes`; throws std::runtime_error naming it on failure.
void write_file(const std::string& path, const std::string& bytes);

// Filesystem steps of test setup and checks, through std::filesystem's error-code forms: a
// failure throws std::runtime_error naming the path and the reason, so the test fails with it.
// Whether something exists at `path` (false too when it cannot be examined).
bool exists(const std::string& path);
// Copies a file, or a directory recursively, over whatever is at `to`.
void copy_path(const std::string& from, const std::string& to);
uint64_t file_size(const std::string& path);
void resize_file(const std::string& path, uint64_t size);
// Removes a file or a directory tree.
void remove_path(const std::string& path);
// Entries of a directory.
size_t count_entries(const std::string& dir);

// A fresh empty directory under the system temp dir, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Mode 0755, so that an unprivileged user (run_unprivileged) can reach what is inside.
  void allow_other_users() const;

 private:
  std::string path_;
};

// A generator seeded from the test's name unless LMX_TEST_SEED is set, so failures reproduce.
std::mt19937_64& rng();
std::vector<float> random_floats(size_t n, float lo = -1.0f, float hi = 1.0f);
Tensor random_tensor(const Shape& shape, DType dtype = DType::kF32, float lo = -1.0f, float hi = 1.0f);

// Names a string-parameterised test instance after its parameter ("tiny-e2b" → "tiny_e2b").
struct ParamName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    std::string name = info.param;
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return name;
  }
};

// Largest |a - b| over two f32 tensors of the same shape (after conversion to f32).
float max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace lmx::test
