// Dynamic values of the Jinja interpreter, modelled on the Python objects Jinja templates see.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace lmx::jinja {

class Value;
class Renderer;

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Python sequence types that share the list representation: dict.keys()/.values()/.items()
// views and range objects.
enum class DictView : uint8_t { kNone, kKeys, kValues, kItems, kRange };

// A list, tuple, range or dict view. Immutable once built (the sandbox forbids list mutation).
// Dict views iterate, have a length and support `in`, but cannot be indexed, sliced or added;
// ranges can be indexed but not added. Both print like Python (dict_keys([...]), range(0, 3)).
struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  DictView view = DictView::kNone;
  int64_t range_start = 0, range_stop = 0, range_step = 1;  // kRange
  uint32_t depth = 1;                                       // nesting depth, see value_depth()
};

// A dict with Python's insertion order. Keys are unique under Python ==.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  uint32_t depth = 1;  // nesting depth, see value_depth()
  // String key -> entry index, built for dicts of more than kIndexedDictSize entries so that
  // lookups in large request objects stay O(1).
  std::unordered_map<std::string_view, size_t> string_index;
  static constexpr size_t kIndexedDictSize = 8;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

// Anything that is not plain data: namespaces, loop contexts, functions and macros.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual std::string repr() const;
  // x.name; returns an undefined Value when there is no such attribute.
  virtual Value get_attribute(const std::string& name) const;
  virtual bool is_callable() const { return false; }
  virtual Value call(const CallArgs& args, Renderer& renderer);
  // Iterators (generators returned by map/select/..., reversed lists) are consumed by iteration.
  virtual bool is_iterator() const { return false; }
  virtual std::vector<Value> consume();  // remaining items; the iterator is then exhausted
  virtual bool next(Value* out);         // one item; false when exhausted
  // How deeply this object nests the values it holds (see value_depth()).
  virtual uint32_t nesting_depth() const { return 0; }
};

// Deepest chain of values a value holds: scalars 0, a list of scalars 1, [[1]] 2; generators and
// bound methods count the values they hold. Building a value deeper than kMaxValueDepth is a
// TemplateError, so printing, comparing and freeing values never recurse without bound.
inline constexpr uint32_t kMaxValueDepth = 1000;
uint32_t value_depth(const Value& v);
// Throws TemplateError when `depth` exceeds kMaxValueDepth.
void check_value_depth(uint32_t depth);

enum class ValueKind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject };

// A value: cheap to copy (strings, lists, dicts and objects are shared, not copied).
class Value {
 public:
  Value() : kind_(ValueKind::kUndefined), int_(0) {}  // undefined without a hint

  // `hint` is the message of the error raised if the undefined is used (e.g. "'x' is undefined").
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict_view(std::vector<Value> items, DictView view);
  static Value range(int64_t start, int64_t stop, int64_t step, std::vector<Value> items);
  static Value dict(std::vector<std::pair<Value, Value>> entries);  // entries must have unique keys
  static Value object(std::shared_ptr<Object> object);
  // A native function value, e.g. a builtin or a bound method (`bound_to` is its receiver).
  static Value function(std::string name, std::function<Value(const CallArgs&, Renderer&)> fn,
                        const Value& bound_to = Value());

  ValueKind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == ValueKind::kUndefined; }
  bool is_none() const { return kind_ == ValueKind::kNone; }
  bool is_bool() const { return kind_ == ValueKind::kBool; }
  bool is_int() const { return kind_ == ValueKind::kInt; }
  bool is_float() const { return kind_ == ValueKind::kFloat; }
  bool is_string() const { return kind_ == ValueKind::kString; }
  bool is_list() const { return kind_ == ValueKind::kList; }  // list or tuple
  bool is_dict() const { return kind_ == ValueKind::kDict; }
  bool is_object() const { return kind_ == ValueKind::kObject; }
  // Python numbers.Number: bool, int, float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_tuple() const { return is_list() && as_list().is_tuple; }
  bool is_dict_view() const {
    return is_list() && as_list().view != DictView::kNone && as_list().view != DictView::kRange;
  }
  // Indexable and sliceable: a list, tuple or range (not a dict view).
  bool is_sequence_list() const {
    return is_list() && (as_list().view == DictView::kNone || as_list().view == DictView::kRange);
  }
  // A list or tuple proper: supports + and * (not a range or view).
  bool is_plain_list() const { return is_list() && as_list().view == DictView::kNone; }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return is_bool() ? (bool_ ? 1 : 0) : int_; }  // bool or int
  double as_double() const { return is_float() ? float_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return *static_cast<const std::string*>(data_.get()); }
  const ListData& as_list() const { return *static_cast<const ListData*>(data_.get()); }
  const DictData& as_dict() const { return *static_cast<const DictData*>(data_.get()); }
  Object& as_object() const { return *static_cast<Object*>(data_.get()); }
  std::shared_ptr<Object> object_ptr() const { return std::static_pointer_cast<Object>(data_); }
  const std::string& undefined_hint() const;
  // Identity of shared payloads, for Python `is` (sameas) on objects.
  const void* identity() const { return data_.get(); }

 private:
  ValueKind kind_;
  union {
    bool bool_;
    int64_t int_;
    double float_;
  };
  std::shared_ptr<void> data_;
};

// Python type name as in error messages: "str", "int", "list", "dict", "NoneType", ...
std::string type_name(const Value& v);
// Python truthiness (undefined is false).
bool truthy(const Value& v);
// Python ==, with Jinja's Undefined equal only to undefined.
bool equals(const Value& a, const Value& b);
// A hash consistent with equals() for hashable values (1, 1.0 and True hash alike).
size_t hash_value(const Value& v);

}  // namespace lmx::jinja
