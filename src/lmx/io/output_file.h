// Files written atomically: into a temporary file beside the target, fsynced, renamed into place.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lmx {

// Writes one file so that readers see the old file or the complete new one, never a part: bytes
// go to "<target>.tmp.<pid>.<n>", and commit() fsyncs, closes and renames it over `target`. A
// writer destroyed before commit() removes its temporary file. Errors throw IoError naming the
// target and the OS reason; a target that is a directory is refused when the writer is created.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string target);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  void commit();

 private:
  [[noreturn]] void fail(const char* what);
  std::string target_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically (AtomicFileWriter), replacing any file there.
void write_text_file(const std::string& path, std::string_view contents);

}  // namespace lmx
