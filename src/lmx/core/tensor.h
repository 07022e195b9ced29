// Tensor: a typed, shaped, strided view over shared storage (owned and 64-byte aligned, or a
// window into a memory-mapped file that the view keeps alive).
#pragma once

#include "lmx/core/device.h"
#include "lmx/core/dtype.h"
#include "lmx/core/error.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace lmx {

using Shape = std::vector<int64_t>;

std::string shape_string(const Shape& shape);
int64_t shape_numel(const Shape& shape);

// Bytes behind one or more tensors. Owned storage is zero-initialised and aligned to kAlignment.
class Storage {
 public:
  static constexpr size_t kAlignment = 64;
  // Allocations of at least this many bytes are mapped anonymous pages (zero without a memset;
  // page-aligned) rather than heap memory.
  static constexpr size_t kMapThreshold = size_t{4} << 20;

  // Zero-filled, aligned, owned allocation of `bytes` bytes.
  static std::shared_ptr<Storage> allocate(size_t bytes);
  // Non-owning window [data, data + bytes) kept valid by `keepalive` (e.g. a mapped file, or a device
  // allocation when `device` is a GPU: then the bytes are not host-addressable).
  static std::shared_ptr<Storage> borrow(std::shared_ptr<const void> keepalive, void* data, size_t bytes,
                                         Device device = Device::cpu());

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage();

  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  Storage() = default;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  bool owned_ = false;
  size_t mapped_bytes_ = 0;  // owned and mapped (kMapThreshold): the length to unmap
  Device device_;
  std::shared_ptr<const void> keepalive_;
};

class Tensor {
 public:
  Tensor() = default;

  // A new zero-filled contiguous tensor.
  static Tensor zeros(Shape shape, DType dtype);
  // A contiguous tensor over existing storage, starting `byte_offset` bytes in.
  static Tensor from_storage(std::shared_ptr<Storage> storage, Shape shape, DType dtype,
                             size_t byte_offset = 0);
  // A new contiguous tensor holding a copy of `values`.
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  // Host memory unless the storage is a device allocation (then only views and raw_data() apply: copies,
  // conversions and element reads are host-only and throw InvalidArgument).
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }  // in elements
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Size of dimension `d`; negative d counts from the end.
  int64_t dim(int d) const;
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw_data() const { return storage_->data() + byte_offset_; }
  template <typename T>
  T* data() const {
    check_dtype(DTypeOf<T>::value);
    return reinterpret_cast<T*>(raw_data());
  }
  template <typename T>
  std::span<T> span() const {
    LMX_REQUIRE(InvalidArgument, is_contiguous(), "span() of a non-contiguous tensor {}", shape_string(shape_));
    return {data<T>(), static_cast<size_t>(numel())};
  }
  // Raw 16-bit view for bf16/f16 tensors.
  const uint16_t* data_u16() const;

  // Views (no copy). reshape requires a contiguous tensor with the same element count.
  Tensor reshape(Shape shape) const;
  // Elements [start, end) along dimension `d`.
  Tensor slice(int d, int64_t start, int64_t end) const;
  // Removes dimension 0 by taking index `i` along it.
  Tensor select(int64_t i) const;
  // The same first element viewed as `shape` with `strides` (in elements); InvalidArgument when the view
  // reaches past the storage.
  Tensor as_strided(Shape shape, Shape strides) const;

  // Copies (new storage).
  Tensor contiguous() const;
  // Converts to another floating dtype (or copies when equal). f32 <-> bf16/f16 only.
  Tensor to(DType dtype) const;
  // Element (as float) at flat row-major index of a floating tensor; slow, for tests and tools.
  float item_f32(int64_t flat_index) const;

  const std::shared_ptr<Storage>& storage() const { return storage_; }

 private:
  void check_dtype(DType expected) const;
  void check_host(const char* what) const;
  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  LMX_REQUIRE(InvalidArgument, shape_numel(shape) == static_cast<int64_t>(values.size()),
                           "from_vector: {} values for shape {}", values.size(), shape_string(shape));
  Tensor t = zeros(std::move(shape), DTypeOf<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace lmx
