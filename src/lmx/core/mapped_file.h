// Read-only memory mapping of a whole file; tensors viewing it keep it alive via shared_ptr.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace lmx {

class MappedFile {
 public:
  // Maps `path` read-only. Throws IoError naming the path on failure. An empty file maps to
  // a null pointer with size 0.
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

// Reads a whole (small) file into a string. Throws IoError naming the path.
std::string read_text_file(const std::string& path);
// Writes `contents` to `path`, replacing it. Throws IoError naming the path.
void write_text_file(const std::string& path, const std::string& contents);

}  // namespace lmx
