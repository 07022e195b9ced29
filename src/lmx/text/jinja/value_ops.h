// Python semantics of operators on values: arithmetic, comparison, membership, len, iteration, [] and
// attributes.
#pragma once

#include "lmx/text/jinja/value.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lmx::jinja {

// Largest string or list an operation may build (repetition, concatenation, join, replace).
// Bounds memory for hostile templates such as "{{ 'x' * 10**12 }}".
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;

// Throws TemplateError when a value of `bytes` would exceed kMaxValueBytes; otherwise charges
// the bytes to the render's work budget. Call before building the value.
void reserve_value_bytes(size_t bytes);

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
const char* binary_op_symbol(BinaryOp op);

// Each of these throws TemplateError with Python's message where Python raises (TypeError,
// ZeroDivisionError, ...) and on int64 overflow (Python integers are unbounded; lmx's are not).
Value binary_op(BinaryOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value unary_plus(const Value& v);
// Python a < b; throws for unorderable types.
bool less_than(const Value& a, const Value& b);
// Throws Python's "unhashable type" TypeError for lists, dicts and dict views (set/dict keys).
void require_hashable(const Value& key);
// Python `item in container`.
bool contains(const Value& container, const Value& item);
// Python len(); undefined has length 0.
int64_t python_len(const Value& v);
// The items of a for loop: list items, dict keys, string characters; undefined gives none.
std::vector<Value> iterate(const Value& v);
// x.name with the sandbox's rules: methods first (unsafe mutating methods give an undefined
// that fails when called), then x['name'], then an undefined.
Value get_attribute(const Value& object, const std::string& name);
// x[key]: item first, then (for string keys) the attribute; missing gives an undefined.
Value get_item(const Value& object, const Value& key);
// x[start:stop:step] on strings (code points), lists and tuples; null bounds are omitted ones.
Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step);
// Throws the UndefinedError message of an undefined value.
[[noreturn]] void fail_undefined(const Value& undefined);
// "'dict object'"-style description used in undefined messages.
std::string object_type_repr(const Value& v);

}  // namespace lmx::jinja
