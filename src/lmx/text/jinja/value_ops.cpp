// Python semantics of operators on values: arithmetic, comparison, membership, len, iteration, [] and
// attributes.
#include "lmx/text/jinja/value_ops.h"

#include "lmx/text/jinja/budget.h"
#include "lmx/text/jinja/methods.h"
#include "lmx/text/jinja/printf_format.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"

#include <cmath>

namespace lmx::jinja {
namespace {

[[noreturn]] void unsupported_operands(const char* op, const Value& a, const Value& b) {
  throw TemplateError(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) +
                      "' and '" + type_name(b) + "'");
}

[[noreturn]] void overflow() {
  throw TemplateError("integer overflow (lmx integers are 64-bit)");
}

void check_size(size_t bytes) {
  reserve_value_bytes(bytes);
}

Value repeat(const Value& seq, int64_t count) {
  if (count <= 0) {
    if (seq.is_string()) return Value::string("");
    return Value::list({}, seq.as_list().is_tuple);
  }
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty()) check_size(s.size() * static_cast<size_t>(std::min<int64_t>(count, kMaxValueBytes + 1)));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) out += s;
    return Value::string(std::move(out));
  }
  const ListData& list = seq.as_list();
  if (!list.items.empty())
    check_size(list.items.size() * sizeof(Value) *
               static_cast<size_t>(std::min<int64_t>(count, kMaxValueBytes + 1)));
  std::vector<Value> items;
  items.reserve(list.items.size() * static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) items.insert(items.end(), list.items.begin(), list.items.end());
  return Value::list(std::move(items), list.is_tuple);
}

// Python's float divmod, returning (floor quotient, remainder).
std::pair<double, double> float_divmod(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  double floordiv;
  if (div != 0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return {floordiv, mod};
}

Value int_pow(int64_t base, int64_t exponent) {
  if (exponent < 0) return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  int64_t result = 1;
  int64_t b = base;
  while (exponent > 0) {
    if (exponent & 1)
      if (__builtin_mul_overflow(result, b, &result)) overflow();
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(b, b, &b)) overflow();
  }
  return Value::integer(result);
}

int compare_sequences(const ListData& x, const ListData& y) {
  size_t n = std::min(x.items.size(), y.items.size());
  for (size_t i = 0; i < n; ++i) {
    if (equals(x.items[i], y.items[i])) continue;
    return less_than(x.items[i], y.items[i]) ? -1 : 1;
  }
  if (x.items.size() == y.items.size()) return 0;
  return x.items.size() < y.items.size() ? -1 : 1;
}

// Python index normalisation for x[i] on a sequence of length n; returns -1 when out of range.
int64_t normalize_index(int64_t i, int64_t n) {
  if (i < 0) i += n;
  return i < 0 || i >= n ? -1 : i;
}

// Jinja's undefined message for a missing attribute: "'dict object' has no attribute 'x'".
Value missing_attribute(const Value& object, const std::string& name) {
  std::string hint = "'";
  hint += object_type_repr(object);
  hint += "' has no attribute '";
  hint += name;
  hint += "'";
  return Value::undefined(std::move(hint));
}

int64_t slice_bound(const Value* v) {
  if (v->is_bool() || v->is_int()) return v->as_int();
  throw TemplateError("slice indices must be integers or None or have an __index__ method");
}

}  // namespace

void reserve_value_bytes(size_t bytes) {
  if (bytes > kMaxValueBytes) throw TemplateError("value too large (limit 64 MiB)");
  charge_bytes(bytes);
}

const char* binary_op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
  }
  return "?";
}

void fail_undefined(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  throw TemplateError(hint.empty() ? "value is undefined" : hint);
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value binary_op(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  const char* symbol = binary_op_symbol(op);
  if (a.is_number() && b.is_number()) {
    bool floating = a.is_float() || b.is_float();
    if (!floating) {
      int64_t x = a.as_int(), y = b.as_int(), r = 0;
      switch (op) {
        case BinaryOp::kAdd:
          if (__builtin_add_overflow(x, y, &r)) overflow();
          return Value::integer(r);
        case BinaryOp::kSub:
          if (__builtin_sub_overflow(x, y, &r)) overflow();
          return Value::integer(r);
        case BinaryOp::kMul:
          if (__builtin_mul_overflow(x, y, &r)) overflow();
          return Value::integer(r);
        case BinaryOp::kDiv:
          if (y == 0) throw TemplateError("division by zero");
          return Value::number(static_cast<double>(x) / static_cast<double>(y));
        case BinaryOp::kFloorDiv:
        case BinaryOp::kMod: {
          if (y == 0)
            throw TemplateError(op == BinaryOp::kMod ? "integer modulo by zero"
                                                     : "integer division or modulo by zero");
          if (x == INT64_MIN && y == -1) {
            if (op == BinaryOp::kMod) return Value::integer(0);
            overflow();
          }
          int64_t q = x / y, m = x % y;
          if (m != 0 && ((m < 0) != (y < 0))) {
            m += y;
            q -= 1;
          }
          return Value::integer(op == BinaryOp::kMod ? m : q);
        }
        case BinaryOp::kPow:
          if (y < 0 && x == 0) throw TemplateError("0.0 cannot be raised to a negative power");
          return int_pow(x, y);
      }
    }
    double x = a.as_double(), y = b.as_double();
    switch (op) {
      case BinaryOp::kAdd:
        return Value::number(x + y);
      case BinaryOp::kSub:
        return Value::number(x - y);
      case BinaryOp::kMul:
        return Value::number(x * y);
      case BinaryOp::kDiv:
        if (y == 0) throw TemplateError("float division by zero");
        return Value::number(x / y);
      case BinaryOp::kFloorDiv:
        if (y == 0) throw TemplateError("float floor division by zero");
        return Value::number(float_divmod(x, y).first);
      case BinaryOp::kMod:
        if (y == 0) throw TemplateError("float modulo");
        return Value::number(float_divmod(x, y).second);
      case BinaryOp::kPow: {
        if (x == 0 && y < 0) throw TemplateError("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y))
          throw TemplateError("negative number cannot be raised to a fractional power");
        double r = std::pow(x, y);
        if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
          throw TemplateError("(34, 'Numerical result out of range')");
        return Value::number(r);
      }
    }
  }
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      check_size(a.as_string().size() + b.as_string().size());
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_plain_list() && b.is_plain_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      check_size((a.as_list().items.size() + b.as_list().items.size()) * sizeof(Value));
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_string()) throw TemplateError("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.is_list() && !a.as_list().is_tuple)
      throw TemplateError("can only concatenate list (not \"" + type_name(b) + "\") to list");
  }
  if (op == BinaryOp::kMul) {
    bool a_seq = a.is_string() || a.is_plain_list();
    bool b_seq = b.is_string() || b.is_plain_list();
    if (a_seq && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if (b_seq && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
    if (a_seq && b.is_float()) throw TemplateError("can't multiply sequence by non-int of type 'float'");
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    std::string out = python_percent_format(a.as_string(), b);
    check_size(out.size());
    return Value::string(std::move(out));
  }
  unsupported_operands(symbol, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value::number(-v.as_double());
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) overflow();
    return Value::integer(-v.as_int());
  }
  throw TemplateError("bad operand type for unary -: '" + type_name(v) + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return v;
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  throw TemplateError("bad operand type for unary +: '" + type_name(v) + "'");
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string())
    return a.as_string() < b.as_string();  // UTF-8 order == code point order
  if (a.is_plain_list() && b.is_plain_list() && a.as_list().is_tuple == b.as_list().is_tuple)
    return compare_sequences(a.as_list(), b.as_list()) < 0;
  throw TemplateError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) +
                      "'");
}

void require_hashable(const Value& key) {
  bool unhashable =
      key.is_dict() || (key.is_plain_list() && !key.is_tuple()) ||
      (key.is_list() && (key.as_list().view == DictView::kKeys || key.as_list().view == DictView::kItems));
  if (unhashable) throw TemplateError("unhashable type: '" + type_name(key) + "'");
  if (key.is_tuple())
    for (const Value& item : key.as_list().items) require_hashable(item);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kString:
      if (!item.is_string())
        throw TemplateError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case ValueKind::kList:
      if (container.as_list().view == DictView::kKeys || container.as_list().view == DictView::kItems)
        require_hashable(item);  // set-like views hash their operand
      for (const Value& v : container.as_list().items)
        if (equals(v, item)) return true;
      return false;
    case ValueKind::kDict:
      require_hashable(item);
      return container.as_dict().find(item) != nullptr;
    case ValueKind::kObject:
      if (container.as_object().is_iterator()) {
        Value v;
        while (container.as_object().next(&v))  // consumes up to the match, as Python does
          if (equals(v, item)) return true;
        return false;
      }
      [[fallthrough]];
    default:
      throw TemplateError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

int64_t python_len(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return 0;
    case ValueKind::kString:
      return static_cast<int64_t>(unicode::length(v.as_string()));
    case ValueKind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case ValueKind::kDict:
      return static_cast<int64_t>(v.as_dict().entries.size());
    default:
      throw TemplateError("object of type '" + type_name(v) + "' has no len()");
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return {};
    case ValueKind::kList:
      return v.as_list().items;
    case ValueKind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& [k, item] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case ValueKind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      if (unicode::is_ascii(s)) {
        chars.reserve(s.size());
        for (char c : s) chars.push_back(Value::string(std::string(1, c)));
      } else {
        for (char32_t c : unicode::decode(s))
          chars.push_back(Value::string(unicode::encode(std::u32string(1, c))));
      }
      return chars;
    }
    case ValueKind::kObject:
      if (v.as_object().is_iterator()) return v.as_object().consume();
      [[fallthrough]];
    default:
      throw TemplateError("'" + type_name(v) + "' object is not iterable");
  }
}

Value get_attribute(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_object()) return object.as_object().get_attribute(name);
  if (std::optional<Value> method = find_method(object, name)) return *method;
  if (object.is_dict()) {
    if (const Value* item = object.as_dict().find(std::string_view(name))) return *item;
  }
  return missing_attribute(object, name);
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  switch (object.kind()) {
    case ValueKind::kDict:
      if (const Value* item = object.as_dict().find(key)) return *item;
      break;
    case ValueKind::kList:
      if ((key.is_int() || key.is_bool()) && object.is_sequence_list()) {
        const auto& items = object.as_list().items;
        int64_t i = normalize_index(key.as_int(), static_cast<int64_t>(items.size()));
        if (i >= 0) return items[static_cast<size_t>(i)];
      }
      break;
    case ValueKind::kString:
      if (key.is_int() || key.is_bool()) {
        const std::string& s = object.as_string();
        if (unicode::is_ascii(s)) {
          int64_t i = normalize_index(key.as_int(), static_cast<int64_t>(s.size()));
          if (i >= 0) return Value::string(std::string(1, s[static_cast<size_t>(i)]));
        } else {
          std::u32string cps = unicode::decode(s);
          int64_t i = normalize_index(key.as_int(), static_cast<int64_t>(cps.size()));
          if (i >= 0) return Value::string(unicode::encode(std::u32string(1, cps[static_cast<size_t>(i)])));
        }
      }
      break;
    case ValueKind::kObject:
      if (key.is_string()) return object.as_object().get_attribute(key.as_string());
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (std::optional<Value> method = find_method(object, key.as_string())) return *method;
    return missing_attribute(object, key.as_string());
  }
  return Value::undefined(object_type_repr(object) + " has no element " + to_repr(key));
}

Value get_slice(const Value& object, const Value* start_v, const Value* stop_v, const Value* step_v) {
  if (object.is_undefined()) fail_undefined(object);
  auto is_null = [](const Value* v) { return v == nullptr || v->is_none(); };
  int64_t step = is_null(step_v) ? 1 : slice_bound(step_v);
  if (step == 0) throw TemplateError("slice step cannot be zero");
  if (!object.is_string() && !object.is_sequence_list()) {
    return Value::undefined(object_type_repr(object) + " has no element slice");
  }
  std::u32string cps;
  bool ascii = object.is_string() && unicode::is_ascii(object.as_string());
  if (object.is_string() && !ascii) cps = unicode::decode(object.as_string());
  int64_t length = object.is_list() ? static_cast<int64_t>(object.as_list().items.size())
                   : ascii          ? static_cast<int64_t>(object.as_string().size())
                                    : static_cast<int64_t>(cps.size());
  // PySlice_AdjustIndices.
  int64_t start, stop;
  if (is_null(start_v)) {
    start = step < 0 ? length - 1 : 0;
  } else {
    start = slice_bound(start_v);
    if (start < 0) {
      start += length;
      if (start < 0) start = step < 0 ? -1 : 0;
    } else if (start >= length) {
      start = step < 0 ? length - 1 : length;
    }
  }
  if (is_null(stop_v)) {
    stop = step < 0 ? -1 : length;
  } else {
    stop = slice_bound(stop_v);
    if (stop < 0) {
      stop += length;
      if (stop < 0) stop = step < 0 ? -1 : 0;
    } else if (stop >= length) {
      stop = step < 0 ? length - 1 : length;
    }
  }
  std::vector<int64_t> indices;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) indices.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) indices.push_back(i);
  }
  if (object.is_list()) {
    std::vector<Value> items;
    items.reserve(indices.size());
    for (int64_t i : indices) items.push_back(object.as_list().items[static_cast<size_t>(i)]);
    return Value::list(std::move(items), object.as_list().is_tuple);
  }
  if (ascii) {
    std::string out;
    out.reserve(indices.size());
    for (int64_t i : indices) out.push_back(object.as_string()[static_cast<size_t>(i)]);
    return Value::string(std::move(out));
  }
  std::u32string out;
  for (int64_t i : indices) out.push_back(cps[static_cast<size_t>(i)]);
  return Value::string(unicode::encode(out));
}

}  // namespace lmx::jinja
