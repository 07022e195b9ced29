// Tensor: a typed, shaped, strided view over shared storage.
#include "lmx/core/tensor.h"

#include "lmx/core/half.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace lmx {

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes) {
  auto s = std::shared_ptr<Storage>(new Storage());
  size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  if (rounded >= kMapThreshold) {
    // Fresh anonymous pages are zero and page-aligned: no memset, and each page is faulted in (and
    // cleared by the kernel) by whichever thread first writes it — in parallel when the tensor is
    // filled by a parallel loop, instead of serially here.
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    (void)madvise(p, rounded, MADV_HUGEPAGE);  // 2 MiB pages where the kernel allows them: 1/512 the faults
    s->data_ = static_cast<std::byte*>(p);
    s->mapped_bytes_ = rounded;
  } else {
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    s->data_ = static_cast<std::byte*>(p);
  }
  s->bytes_ = bytes;
  s->owned_ = true;
  return s;
}

std::shared_ptr<Storage> Storage::borrow(std::shared_ptr<const void> keepalive, void* data, size_t bytes,
                                         Device device) {
  auto s = std::shared_ptr<Storage>(new Storage());
  s->data_ = static_cast<std::byte*>(data);
  s->bytes_ = bytes;
  s->device_ = device;
  s->keepalive_ = std::move(keepalive);
  return s;
}

Storage::~Storage() {
  if (owned_ && mapped_bytes_ > 0)
    munmap(data_, mapped_bytes_);
  else if (owned_)
    std::free(data_);
}

namespace {
Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}
}  // namespace

Tensor Tensor::zeros(Shape shape, DType dtype) {
  for (int64_t d : shape) LMX_REQUIRE(InvalidArgument, d >= 0, "negative dimension in {}", shape_string(shape));
  auto storage = Storage::allocate(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  return from_storage(std::move(storage), std::move(shape), dtype);
}

Tensor Tensor::from_storage(std::shared_ptr<Storage> storage, Shape shape, DType dtype, size_t byte_offset) {
  Tensor t;
  size_t need = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  LMX_REQUIRE(InvalidArgument, byte_offset + need <= storage->bytes(),
                           "tensor {} of {} bytes does not fit storage of {} bytes at offset {}",
                           shape_string(shape), need, storage->bytes(), byte_offset);
  t.storage_ = std::move(storage);
  t.byte_offset_ = byte_offset;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

int64_t Tensor::dim(int d) const {
  int n = ndim();
  if (d < 0) d += n;
  LMX_REQUIRE(InvalidArgument, d >= 0 && d < n, "dimension {} out of range for shape {}", d, shape_string(shape_));
  return shape_[d];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void Tensor::check_dtype(DType expected) const {
  LMX_REQUIRE(InvalidArgument, dtype_ == expected, "tensor has dtype {}, expected {}", dtype_name(dtype_),
                           dtype_name(expected));
}

void Tensor::check_host(const char* what) const {
  LMX_REQUIRE(InvalidArgument, device().is_cpu(), "{} of a tensor on {}: host tensors only", what,
              device().name());
}

const uint16_t* Tensor::data_u16() const {
  LMX_REQUIRE(InvalidArgument, dtype_ == DType::kBF16 || dtype_ == DType::kF16,
                           "data_u16 on a {} tensor", dtype_name(dtype_));
  return reinterpret_cast<const uint16_t*>(raw_data());
}

Tensor Tensor::reshape(Shape shape) const {
  LMX_REQUIRE(InvalidArgument, is_contiguous(), "reshape of a non-contiguous tensor {}", shape_string(shape_));
  LMX_REQUIRE(InvalidArgument, shape_numel(shape) == numel(), "cannot reshape {} to {}", shape_string(shape_),
                           shape_string(shape));
  Tensor t = *this;
  t.strides_ = contiguous_strides(shape);
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  if (d < 0) d += ndim();
  LMX_REQUIRE(InvalidArgument, d >= 0 && d < ndim() && 0 <= start && start <= end && end <= shape_[d],
                           "slice [{}, {}) of dimension {} out of range for {}", start, end, d,
                           shape_string(shape_));
  Tensor t = *this;
  t.byte_offset_ += static_cast<size_t>(start * strides_[d]) * dtype_size(dtype_);
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int64_t i) const {
  LMX_REQUIRE(InvalidArgument, ndim() >= 1 && i >= 0 && i < shape_[0], "select({}) out of range for {}", i,
                           shape_string(shape_));
  Tensor t = *this;
  t.byte_offset_ += static_cast<size_t>(i * strides_[0]) * dtype_size(dtype_);
  t.shape_.erase(t.shape_.begin());
  t.strides_.erase(t.strides_.begin());
  return t;
}

Tensor Tensor::as_strided(Shape shape, Shape strides) const {
  LMX_REQUIRE(InvalidArgument, shape.size() == strides.size(), "as_strided: shape {} with {} strides",
              shape_string(shape), strides.size());
  int64_t last = 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    LMX_REQUIRE(InvalidArgument, shape[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride");
    if (shape[i] == 0) last = -1;
    if (last >= 0) last += (shape[i] - 1) * strides[i];
  }
  LMX_REQUIRE(
      InvalidArgument,
      last < 0 || byte_offset_ + static_cast<size_t>(last + 1) * dtype_size(dtype_) <= storage_->bytes(),
      "as_strided: view {} reaches past the storage", shape_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

Tensor Tensor::contiguous() const {
  check_host("contiguous()");
  Tensor out = zeros(shape_, dtype_);
  size_t esize = dtype_size(dtype_);
  if (is_contiguous()) {
    std::memcpy(out.raw_data(), raw_data(), nbytes());
    return out;
  }
  int64_t n = numel();
  auto* dst = static_cast<std::byte*>(out.raw_data());
  auto* src = static_cast<const std::byte*>(raw_data());
  if (n == 0) return out;
  if (strides_.back() == 1) {
    // The last dimension is contiguous (every view slice/select/reshape makes): one copy per run of it.
    // (Element by element, splitting a 128-expert gate_up stack took seconds per layer.)
    const int64_t run = shape_.back();
    std::vector<int64_t> index(shape_.size() - 1, 0);
    for (int64_t r = 0; r < n / run; ++r) {
      int64_t offset = 0;
      for (size_t k = 0; k < index.size(); ++k) offset += index[k] * strides_[k];
      std::memcpy(dst + static_cast<size_t>(r * run) * esize, src + static_cast<size_t>(offset) * esize,
                  static_cast<size_t>(run) * esize);
      for (size_t k = index.size(); k-- > 0;) {
        if (++index[k] < shape_[k]) break;
        index[k] = 0;
      }
    }
    return out;
  }
  // Generic strided copy, one element at a time.
  std::vector<int64_t> index(shape_.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t offset = 0;
    for (size_t k = 0; k < shape_.size(); ++k) offset += index[k] * strides_[k];
    std::memcpy(dst + flat * esize, src + offset * esize, esize);
    for (size_t k = shape_.size(); k-- > 0;) {
      if (++index[k] < shape_[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

float Tensor::item_f32(int64_t flat_index) const {
  check_host("item_f32()");
  LMX_REQUIRE(InvalidArgument, flat_index >= 0 && flat_index < numel(), "item index {} out of range", flat_index);
  int64_t offset = 0, rem = flat_index;
  for (size_t k = shape_.size(); k-- > 0;) {
    offset += (rem % shape_[k]) * strides_[k];
    rem /= shape_[k];
  }
  const std::byte* p = static_cast<const std::byte*>(raw_data()) + offset * dtype_size(dtype_);
  uint16_t h;
  switch (dtype_) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case DType::kBF16:
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    case DType::kF16:
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    default:
      throw InvalidArgument(fmt::format("item_f32 on a {} tensor", dtype_name(dtype_)));
  }
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return contiguous();
  LMX_REQUIRE(InvalidArgument, is_floating(dtype) && is_floating(dtype_), "cannot convert {} to {}",
                           dtype_name(dtype_), dtype_name(dtype));
  Tensor src = contiguous();
  Tensor out = zeros(shape_, dtype);
  int64_t n = numel();
  if (dtype == DType::kF32) {
    float* o = out.data<float>();
    const uint16_t* s = src.data_u16();
    if (dtype_ == DType::kBF16)
      for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(s[i]);
    else
      for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(s[i]);
    return out;
  }
  Tensor f32 = dtype_ == DType::kF32 ? src : src.to(DType::kF32);
  const float* s = f32.data<float>();
  auto* o = static_cast<uint16_t*>(out.raw_data());
  if (dtype == DType::kBF16)
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_bf16(s[i]);
  else
    for (int64_t i = 0; i < n; ++i) o[i] = f32_to_f16(s[i]);
  return out;
}

}  // namespace lmx
