// Output directories written whole: built under a temporary name beside the target, then renamed into place.
#pragma once

#include <string>

namespace lmx {

// The contents of an output directory (a converted or synthetic checkpoint) are written into
// path(), a fresh directory ".<name>.partial-<pid>-<n>" beside the target, and commit() moves them
// into place in one rename, so the target never holds a mix of old and new files or a partial
// result. Without commit() (an error, Ctrl-C) the destructor removes the staging directory.
class StagedDirectory {
 public:
  // Checks the target before anything is written and creates the staging directory (and any
  // missing parent of the target). The target may be absent or an empty directory; a non-empty
  // directory only when `replace`, and then it is replaced whole at commit(). Throws
  // InvalidArgument naming the target when it exists but is not a directory, is not empty
  // (without `replace`) or is the root directory; IoError with the OS reason when it cannot be
  // examined or the staging directory cannot be created.
  StagedDirectory(const std::string& target, bool replace);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // The directory to write into.
  const std::string& path() const { return staging_; }
  const std::string& target() const { return target_; }

  // Moves the staged contents to the target: a rename when the target is absent or empty; with
  // `replace`, an atomic exchange with the old directory, which is then removed. The target's
  // state is checked again (it may have changed while the contents were written). Throws like the
  // constructor, or IoError when a rename fails.
  void commit();

 private:
  void check_target() const;
  std::string target_;
  std::string staging_;
  bool replace_ = false;
  bool committed_ = false;
};

// True when `a` and `b` name the same existing directory, or `b` lies inside `a` (after resolving
// symbolic links). False when either does not exist.
bool same_or_inside(const std::string& a, const std::string& b);

}  // namespace lmx
