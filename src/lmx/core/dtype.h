// Element types of tensors, their sizes and their safetensors names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace lmx {

enum class DType : uint8_t { kF32, kBF16, kF16, kI8, kU8, kI32, kU32, kI64 };

// Bytes per element.
size_t dtype_size(DType dtype);
// Safetensors spelling: "F32", "BF16", "F16", "I8", "U8", "I32", "U32", "I64".
std::string_view dtype_name(DType dtype);
// Parses a safetensors dtype string; nullopt when lmx does not know it.
std::optional<DType> dtype_from_name(std::string_view name);
bool is_floating(DType dtype);

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kI8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<uint32_t> { static constexpr DType value = DType::kU32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };

}  // namespace lmx
