// Fuzz-style test: seeded random corruptions of a valid safetensors file either open with every
// tensor view inside the file, or throw an lmx::Error; nothing crashes or reads out of bounds.
#include "io_test_helpers.h"
#include "lmx/io/output_file.h"
#include "lmx/io/safetensors.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

namespace lmx {
namespace {

uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return n;
}

// One random corruption of `bytes`; mostly inside the header, where the parser looks.
std::string mutate(std::string bytes, std::mt19937_64& gen) {
  static constexpr char kJsonChars[] = "0123456789[]{},:\"-.eE \\u";
  auto pick = [&gen](size_t n) { return static_cast<size_t>(gen() % n); };
  int edits = 1 + static_cast<int>(pick(3));
  for (int e = 0; e < edits && bytes.size() > 8; ++e) {
    // End of the header as declared, clamped to the file (earlier edits may have broken either).
    const size_t header_end =
        static_cast<size_t>(std::min<uint64_t>(header_length(bytes), bytes.size() - 8)) + 8;
    const size_t in_header = 8 + pick(std::max<size_t>(1, header_end - 8));
    switch (pick(10)) {
      case 0:
      case 1:
      case 2:  // a JSON-significant character in the header
        bytes[in_header] = kJsonChars[pick(sizeof(kJsonChars) - 1)];
        break;
      case 3:  // any byte in the header
        bytes[in_header] = static_cast<char>(gen());
        break;
      case 4:  // any byte anywhere, the length prefix included
        bytes[pick(bytes.size())] = static_cast<char>(gen());
        break;
      case 5:  // truncation
        bytes.resize(pick(bytes.size() + 1));
        break;
      case 6: {  // a digit run in the header grows, keeping the length prefix consistent
        bytes.insert(in_header, 1, static_cast<char>('0' + pick(10)));
        uint64_t n = header_length(bytes) + 1;
        for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
        break;
      }
      case 7: {  // a header byte disappears, keeping the length prefix consistent
        bytes.erase(in_header, 1);
        uint64_t n = header_length(bytes) - 1;
        for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
        break;
      }
      case 8:  // a small change to the length prefix
        bytes[0] = static_cast<char>(bytes[0] + static_cast<char>(pick(17)) - 8);
        break;
      default:  // a byte of data
        bytes[std::min(bytes.size() - 1, header_end + pick(64))] ^= 0x5a;
        break;
    }
  }
  return bytes;
}

// A temporary directory in memory (/dev/shm) when the machine has one, else under the system temp
// dir: rewriting a file thousands of times on a disk filesystem dominates the test's run time.
class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) {
      char pattern[] = "/dev/shm/lmx-fuzz-XXXXXX";
      if (::mkdtemp(pattern)) path_ = pattern;
    }
    if (path_.empty()) path_ = fallback_.path();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (path_ != fallback_.path()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  test::TempDir fallback_;
  std::string path_;
};

TEST(SafetensorsFuzz, RandomCorruptionsNeverCrashOrEscapeTheFile) {
  test::TempDir dir;
  const std::string valid_path = dir.file("valid.safetensors");
  write_safetensors(valid_path,
                    {{"embed", test::random_tensor({4, 3}, DType::kBF16)},
                     {"norm", test::random_tensor({3}, DType::kF32)},
                     {"empty", Tensor::zeros({0, 2}, DType::kI32)},
                     {"ids", test::random_any_tensor({2}, DType::kI64)}},
                    {{"format", "pt"}});
  const std::string valid = test::read_file(valid_path);
  ASSERT_NO_THROW(SafetensorsFile::open(valid_path));

  std::mt19937_64& gen = test::rng();
  ScratchDir scratch;
  const std::string path = scratch.path() + "/mutant.safetensors";
  int opened = 0, rejected = 0;
  for (int iteration = 0; iteration < 4000; ++iteration) {
    const std::string bytes = mutate(valid, gen);
    write_text_file(path, bytes);
    try {
      auto file = SafetensorsFile::open(path);
      ++opened;
      const uint64_t data_start = 8 + header_length(bytes);
      for (const auto& name : file->names()) {
        const TensorInfo& info = file->info(name);
        ASSERT_LE(info.begin, info.end);
        ASSERT_LE(data_start + info.end, bytes.size()) << "iteration " << iteration << " tensor " << name;
        Tensor t = file->tensor(name);
        ASSERT_EQ(t.nbytes(), info.nbytes());
        ASSERT_EQ(std::memcmp(t.raw_data(), bytes.data() + data_start + info.begin, t.nbytes()), 0);
      }
    } catch (const Error&) {
      ++rejected;
    }
  }
  // Both outcomes must actually be exercised for the test to mean anything.
  EXPECT_GT(opened, 50);
  EXPECT_GT(rejected, 50);
}

}  // namespace
}  // namespace lmx
