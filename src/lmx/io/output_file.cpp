// Files written atomically: into a temporary file beside the target, fsynced, renamed into place.
#include "lmx/io/output_file.h"

#include "lmx/core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace lmx {

AtomicFileWriter::AtomicFileWriter(std::string target) : target_(std::move(target)) {
  LMX_REQUIRE(IoError, !target_.empty(), "cannot write to an empty path");
  struct stat st {};
  LMX_REQUIRE(IoError, ::stat(target_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode),
              "cannot write {}: it is a directory", target_);
  static std::atomic<uint64_t> counter{0};
  temp_ = fmt::format("{}.tmp.{}.{}", target_, ::getpid(), counter++);
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create a temporary file");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("cannot write");
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) fail("cannot fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("cannot close");
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("cannot rename the temporary file into place");
  committed_ = true;
  // Persist the rename itself; best effort (some filesystems refuse fsync on directories).
  const size_t slash = target_.rfind('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : target_.substr(0, slash);
  const int dir_fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void AtomicFileWriter::fail(const char* what) {
  throw IoError(fmt::format("{}: {}: {}", target_, what, std::strerror(errno)));
}

void write_text_file(const std::string& path, std::string_view contents) {
  AtomicFileWriter out(path);
  out.write(contents);
  out.commit();
}

}  // namespace lmx
