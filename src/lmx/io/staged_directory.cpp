// Output directories written whole: built under a temporary name beside the target, then renamed into place.
#include "lmx/io/staged_directory.h"

#include "lmx/core/error.h"
#include "lmx/io/directory.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>

namespace lmx {
namespace {

// `path` without trailing slashes ("/" stays "/").
std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The canonical path of an existing file; nullopt when it does not exist.
std::optional<std::string> real_path(const std::string& path) {
  std::unique_ptr<char, void (*)(void*)> resolved(::realpath(path.c_str(), nullptr), &::free);
  if (!resolved) return std::nullopt;
  return std::string(resolved.get());
}

// Creates `path` and its missing parents (mode 0777 less the umask).
void make_directories(const std::string& path) {
  if (path_exists(path)) {
    require_directory(path, "output parent directory");
    return;
  }
  const std::string parent = parent_of(path);
  if (parent != path) make_directories(parent);
  if (::mkdir(path.c_str(), 0777) != 0 && errno != EEXIST)
    throw IoError(fmt::format("cannot create directory {}: {}", path, std::strerror(errno)));
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // best effort: leftovers are hidden ".partial" names
}

void sync_directory(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);  // best effort: some filesystems refuse fsync on directories
    ::close(fd);
  }
}

}  // namespace

StagedDirectory::StagedDirectory(const std::string& target, bool replace)
    : target_(strip_trailing_slashes(target)), replace_(replace) {
  LMX_REQUIRE(InvalidArgument, !target_.empty(), "the output directory path is empty");
  check_target();
  const std::string parent = parent_of(target_);
  make_directories(parent);
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0;; ++attempt) {
    std::string candidate =
        join_path(parent, fmt::format(".{}.partial-{}-{}", base_name(target_), ::getpid(), counter++));
    if (::mkdir(candidate.c_str(), 0777) == 0) {
      staging_ = std::move(candidate);
      break;
    }
    if (errno != EEXIST || attempt > 100)
      throw IoError(
          fmt::format("cannot create a staging directory beside {}: {}", target_, std::strerror(errno)));
  }
}

StagedDirectory::~StagedDirectory() {
  if (!committed_ && !staging_.empty()) remove_tree(staging_);
}

void StagedDirectory::check_target() const {
  std::optional<std::string> resolved = real_path(target_);
  LMX_REQUIRE(InvalidArgument, !(resolved && *resolved == "/") && target_ != "/",
              "refusing to write the output directory over the root directory");
  if (!path_exists(target_)) return;
  struct stat st {};
  if (::stat(target_.c_str(), &st) != 0)
    throw IoError(fmt::format("cannot access {}: {}", target_, std::strerror(errno)));
  LMX_REQUIRE(InvalidArgument, S_ISDIR(st.st_mode), "output {} exists and is not a directory", target_);
  LMX_REQUIRE(InvalidArgument, replace_ || is_empty_directory(target_),
              "output directory {} is not empty (--force replaces it whole)", target_);
}

void StagedDirectory::commit() {
  LMX_REQUIRE(InvalidArgument, !committed_, "{}: already committed", target_);
  check_target();
  sync_directory(staging_);
  const bool occupied = path_exists(target_) && !is_empty_directory(target_);
  if (!occupied) {
    // rename(2) replaces an empty directory in one step.
    if (::rename(staging_.c_str(), target_.c_str()) != 0)
      throw IoError(fmt::format("cannot move the output into {}: {}", target_, std::strerror(errno)));
    committed_ = true;
  } else {
    // Swap the finished directory with the old one atomically, then remove the old one (now at
    // the staging name). Filesystems without RENAME_EXCHANGE take two renames.
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
      committed_ = true;
      remove_tree(staging_);
    } else {
      const std::string old = staging_ + ".old";
      if (::rename(target_.c_str(), old.c_str()) != 0)
        throw IoError(fmt::format("cannot move the old {} aside: {}", target_, std::strerror(errno)));
      if (::rename(staging_.c_str(), target_.c_str()) != 0) {
        const int err = errno;
        ::rename(old.c_str(), target_.c_str());  // put the old directory back
        throw IoError(fmt::format("cannot move the output into {}: {}", target_, std::strerror(err)));
      }
      committed_ = true;
      remove_tree(old);
    }
  }
  sync_directory(parent_of(target_));
}

bool same_or_inside(const std::string& a, const std::string& b) {
  std::optional<std::string> ra = real_path(a), rb = real_path(b);
  if (!ra || !rb) return false;
  if (*ra == *rb || *ra == "/") return true;
  return rb->size() > ra->size() && rb->compare(0, ra->size(), *ra) == 0 && (*rb)[ra->size()] == '/';
}

}  // namespace lmx
