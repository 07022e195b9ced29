// Read-only memory mapping of a whole file.
#include "lmx/io/mapped_file.h"

#include "lmx/core/error.h"
#include "lmx/io/input_file.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

namespace lmx {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  InputFile input = InputFile::open(path);
  auto file = std::shared_ptr<MappedFile>(new MappedFile());
  file->path_ = path;
  file->size_ = static_cast<size_t>(input.size());
  if (file->size_ > 0) {
    void* p = mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, input.fd(), 0);
    if (p == MAP_FAILED) throw IoError(fmt::format("cannot map {}: {}", path, std::strerror(errno)));
    file->data_ = static_cast<std::byte*>(p);
  }
  return file;
}

MappedFile::~MappedFile() {
  if (data_) munmap(data_, size_);
}

}  // namespace lmx
