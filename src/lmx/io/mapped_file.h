// Read-only memory mapping of a whole file; tensors viewing it keep it alive via shared_ptr.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace lmx {

class MappedFile {
 public:
  // Maps the regular file `path` read-only (opened as InputFile::open does: never blocking, with
  // a FIFO, device or directory refused). Throws IoError naming the path and the OS reason. An
  // empty file maps to a null pointer with size 0.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

}  // namespace lmx
