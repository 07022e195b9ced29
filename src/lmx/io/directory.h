// Directory checks and listings that report every failure with the path and the OS reason.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lmx {

// Throws IoError "<what> <path>: <reason>" when `path` cannot be reached (missing, permission,
// symbolic link loop, ...) or is not a directory. `what` names the role ("model directory").
void require_directory(const std::string& path, std::string_view what);

// True when something exists at `path` (links followed); false only when nothing is there
// (ENOENT). Any other failure (permission, link loop, a file where a directory should be, a
// dangling link) throws IoError naming the path and the reason.
bool path_exists(const std::string& path);

// True when `path` is a directory with no entries. Throws like path_exists when it cannot be read.
bool is_empty_directory(const std::string& path);

// Names of the entries of directory `path` (without "." and ".."), sorted. Throws IoError naming
// the path and the reason when it cannot be listed.
std::vector<std::string> list_directory(const std::string& path);

// `path` joined with `name` by one '/'.
std::string join_path(const std::string& path, std::string_view name);

}  // namespace lmx
