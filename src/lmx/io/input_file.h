// The one way lmx opens a file it reads: regular files only, a size cap per kind, errors naming the path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lmx {

// What a file read whole holds. Each kind has a size cap, checked before a byte is read, so a
// link to a huge file (or a file that grows while it is read) cannot exhaust memory. Weights are
// not read whole: they are mapped (MappedFile) and validated by their reader.
enum class InputKind {
  kConfig,     // config.json, generation_config.json, tokenizer_config.json, index files
  kTokenizer,  // tokenizer.json, tokenizer.model
  kTemplate,   // chat_template.jinja
  kUserData,   // files named by flags: --messages, --tools, --text-file, synth --config
};

// The most bytes a file of `kind` may hold.
uint64_t input_size_cap(InputKind kind);
// "config file", "tokenizer file", ... for messages.
const char* input_kind_name(InputKind kind);

// An open read-only descriptor of a regular file, closed when the object dies.
class InputFile {
 public:
  // Opens `path`, following symbolic links, without ever blocking (a FIFO or device in place of
  // the file is refused, not waited on). Throws IoError naming the path and the OS reason
  // ("No such file or directory", "Permission denied", "Too many levels of symbolic links", ...),
  // or that it is a directory, FIFO, device or socket rather than a regular file.
  static InputFile open(const std::string& path);
  // As open(), but nullopt when nothing exists at `path`. A dangling symbolic link exists (it
  // names a file that does not) and throws IoError saying so.
  static std::optional<InputFile> open_if_exists(const std::string& path);

  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  // Size in bytes when opened.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // The whole contents. Throws IoError naming the path when the file is larger than the cap of
  // `kind` (checked before reading, and again while reading, for files that grow) or a read fails.
  std::string read_all(InputKind kind);

 private:
  InputFile(int fd, uint64_t size, std::string path) : fd_(fd), size_(size), path_(std::move(path)) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// InputFile::open(path).read_all(kind).
std::string read_input_file(const std::string& path, InputKind kind);
// As read_input_file, but nullopt when nothing exists at `path` (see InputFile::open_if_exists).
std::optional<std::string> read_input_file_if_exists(const std::string& path, InputKind kind);

}  // namespace lmx
