// Directory checks and listings that report every failure with the path and the OS reason.
#include "lmx/io/directory.h"

#include "lmx/core/error.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace lmx {

void require_directory(const std::string& path, std::string_view what) {
  LMX_REQUIRE(IoError, !path.empty(), "{}: the path is empty", what);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IoError(fmt::format("{} {}: {}", what, path, std::strerror(errno)));
  LMX_REQUIRE(IoError, S_ISDIR(st.st_mode), "{} {}: not a directory", what, path);
}

bool path_exists(const std::string& path) {
  LMX_REQUIRE(IoError, !path.empty(), "cannot check an empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return true;
  const int err = errno;
  if (err == ENOENT) {
    struct stat link {};
    if (::lstat(path.c_str(), &link) != 0) return false;
    throw IoError(fmt::format("cannot access {}: a symbolic link to a file that does not exist", path));
  }
  throw IoError(fmt::format("cannot access {}: {}", path, std::strerror(err)));
}

bool is_empty_directory(const std::string& path) {
  return list_directory(path).empty();
}

std::vector<std::string> list_directory(const std::string& path) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(path.c_str()), &::closedir);
  if (!dir) throw IoError(fmt::format("cannot list directory {}: {}", path, std::strerror(errno)));
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(dir.get());
    if (!entry) {
      if (errno != 0) throw IoError(fmt::format("cannot list directory {}: {}", path, std::strerror(errno)));
      break;
    }
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string join_path(const std::string& path, std::string_view name) {
  if (path.empty()) return std::string(name);
  if (path.back() == '/') return path + std::string(name);
  return path + "/" + std::string(name);
}

}  // namespace lmx
