// The one way lmx opens a file it reads: regular files only, a size cap per kind, errors naming the path.
#include "lmx/io/input_file.h"

#include "lmx/core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace lmx {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// What a non-regular file is, for messages.
const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] void fail_open(const std::string& path, int err) {
  throw IoError(fmt::format("cannot open {}: {}", path, std::strerror(err)));
}

// Opens `path`; nullopt for ENOENT when `missing_ok` and no dangling link is in the way.
std::optional<std::pair<int, uint64_t>> open_regular(const std::string& path, bool missing_ok) {
  LMX_REQUIRE(IoError, !path.empty(), "cannot open an empty path");
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. It has no effect on
  // reads of regular files, the only kind kept open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      struct stat link {};
      if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode))
        throw IoError(fmt::format("cannot open {}: a symbolic link to a file that does not exist", path));
      if (missing_ok) return std::nullopt;
    }
    fail_open(path, err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_open(path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(
        fmt::format("cannot read {}: it is {}, not a regular file", path, file_type_name(st.st_mode)));
  }
  return std::pair{fd, static_cast<uint64_t>(st.st_size)};
}

}  // namespace

uint64_t input_size_cap(InputKind kind) {
  switch (kind) {
    case InputKind::kConfig:
      return 64 * kMiB;
    case InputKind::kTokenizer:
      return 256 * kMiB;
    case InputKind::kTemplate:
      return 16 * kMiB;
    case InputKind::kUserData:
      return 256 * kMiB;
  }
  return 0;
}

const char* input_kind_name(InputKind kind) {
  switch (kind) {
    case InputKind::kConfig:
      return "config file";
    case InputKind::kTokenizer:
      return "tokenizer file";
    case InputKind::kTemplate:
      return "template file";
    case InputKind::kUserData:
      return "input file";
  }
  return "file";
}

InputFile InputFile::open(const std::string& path) {
  auto [fd, size] = *open_regular(path, /*missing_ok=*/false);
  return InputFile(fd, size, path);
}

std::optional<InputFile> InputFile::open_if_exists(const std::string& path) {
  auto opened = open_regular(path, /*missing_ok=*/true);
  if (!opened) return std::nullopt;
  return InputFile(opened->first, opened->second, path);
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string InputFile::read_all(InputKind kind) {
  const uint64_t cap = input_size_cap(kind);
  auto too_large = [&](uint64_t bytes) {
    return IoError(fmt::format("{}: {} bytes exceeds the limit of {} bytes for a {}", path_, bytes, cap,
                               input_kind_name(kind)));
  };
  if (size_ > cap) throw too_large(size_);
  // Reads until EOF rather than trusting the size: files in /proc report 0, and a file may grow.
  std::string out;
  out.resize(static_cast<size_t>(size_) + 1);
  size_t filled = 0;
  for (;;) {
    if (filled == out.size()) {
      if (out.size() > cap) throw too_large(out.size());
      out.resize(std::min<uint64_t>(cap + 1, out.size() * 2 + 4096));
    }
    const ssize_t n = ::read(fd_, out.data() + filled, out.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw IoError(fmt::format("cannot read {}: {}", path_, std::strerror(errno)));
    if (n == 0) break;
    filled += static_cast<size_t>(n);
  }
  if (filled > cap) throw too_large(filled);
  out.resize(filled);
  return out;
}

std::string read_input_file(const std::string& path, InputKind kind) {
  return InputFile::open(path).read_all(kind);
}

std::optional<std::string> read_input_file_if_exists(const std::string& path, InputKind kind) {
  std::optional<InputFile> file = InputFile::open_if_exists(path);
  if (!file) return std::nullopt;
  return file->read_all(kind);
}

}  // namespace lmx
