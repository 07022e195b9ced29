// Safetensors files: validated zero-copy reading over mmap, checkpoints of one or many shards, writing.
#pragma once

#include "lmx/core/tensor.h"
#include "lmx/io/mapped_file.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lmx {

// One tensor's header entry. Byte offsets count from the start of the data section (the byte
// after the header), exactly as stored in "data_offsets"; end - begin == numel * dtype size.
struct TensorInfo {
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
};

// A memory-mapped safetensors file whose header has been fully validated at open(): every
// tensor's byte range lies inside the file, matches its shape and dtype, and overlaps no other.
// Tensors are views into the mapping (no copy, possibly not 64-byte aligned) that keep the
// mapping alive after this object is gone. Immutable after open; safe to share across threads.
class SafetensorsFile {
 public:
  // Header length limit, as in the reference implementation.
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // Maps and validates `path`. Throws IoError (cannot open/map), FormatError (malformed: the
  // message names the file and, where there is one, the tensor) or Unsupported (a valid
  // safetensors dtype lmx has no type for, e.g. F64).
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Tensor names in ascending byte order.
  std::vector<std::string> names() const;
  size_t size() const { return tensors_.size(); }
  // Throws FormatError naming the file and tensor when `name` is absent.
  const TensorInfo& info(const std::string& name) const;
  // Zero-copy contiguous view of the tensor's bytes.
  Tensor tensor(const std::string& name) const;
  // The "__metadata__" block (string -> string); empty when the header has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Sum of all tensors' byte sizes.
  uint64_t tensor_bytes() const { return tensor_bytes_; }

 private:
  SafetensorsFile() = default;
  std::shared_ptr<MappedFile> file_;
  uint64_t data_start_ = 0;  // file offset of the data section: 8 + header length
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t tensor_bytes_ = 0;
};

// The weights of a model directory, from the first of these that exists:
//   1. dir/model.safetensors;
//   2. dir/model.safetensors.index.json ({"weight_map": {tensor: shard file}}): every shard must
//      open and hold every tensor mapped to it; only mapped tensors are exposed;
//   3. every dir/*.safetensors, in sorted order.
// A tensor name appearing in two files (case 3) is a FormatError. Cheap to copy (shares files).
class Checkpoint {
 public:
  // Throws IoError when `dir` is not a directory or holds no weights, FormatError (naming the
  // index, shard and tensor) when the files disagree or are malformed.
  static Checkpoint open_dir(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  size_t size() const { return where_.size(); }
  // Both throw FormatError naming the directory and tensor when `name` is absent.
  const TensorInfo& info(const std::string& name) const;
  Tensor tensor(const std::string& name) const;
  // Path of the file holding `name` (for error messages).
  const std::string& file_of(const std::string& name) const;
  // The opened files, in the order above.
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }
  // Sum of the byte sizes of all exposed tensors.
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  const SafetensorsFile& file_holding(const std::string& name) const;
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index into files_
  uint64_t total_bytes_ = 0;
};

// Writes `tensors` (in the given order; non-contiguous ones are copied) and `metadata` as a
// safetensors file readable by the reference implementation: header JSON padded with spaces to a
// multiple of 8 bytes, data packed in order. Writes a temporary file beside `path`, fsyncs and
// renames it over `path`, so readers never see a partial file. Throws InvalidArgument for an
// undefined tensor, a duplicate name or the reserved name "__metadata__"; IoError naming `path`
// when the file cannot be written.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lmx
