// Element types of tensors, their sizes and their safetensors names.
#include "lmx/core/dtype.h"

#include <array>

namespace lmx {
namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 8> kDTypes = {{
    {DType::kF32, "F32", 4},
    {DType::kBF16, "BF16", 2},
    {DType::kF16, "F16", 2},
    {DType::kI8, "I8", 1},
    {DType::kU8, "U8", 1},
    {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},
    {DType::kI64, "I64", 8},
}};
}  // namespace

size_t dtype_size(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].size; }
std::string_view dtype_name(DType dtype) { return kDTypes[static_cast<size_t>(dtype)].name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& info : kDTypes)
    if (info.name == name) return info.dtype;
  return std::nullopt;
}

bool is_floating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
}

}  // namespace lmx
