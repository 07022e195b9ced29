// Dynamic values of the Jinja interpreter, modelled on the Python objects Jinja templates see.
#include "lmx/text/jinja/value.h"

#include "lmx/text/jinja/template_error.h"

#include <algorithm>

namespace lmx::jinja {
namespace {

class NativeFunction : public Object {
 public:
  NativeFunction(std::string name, std::function<Value(const CallArgs&, Renderer&)> fn, uint32_t depth)
      : name_(std::move(name)), fn_(std::move(fn)), depth_(depth) {}
  uint32_t nesting_depth() const override { return depth_; }
  std::string type_name() const override { return "function"; }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }
  bool is_callable() const override { return true; }
  Value call(const CallArgs& args, Renderer& renderer) override { return fn_(args, renderer); }

 private:
  std::string name_;
  std::function<Value(const CallArgs&, Renderer&)> fn_;
  uint32_t depth_;
};

const std::string& empty_string() {
  static const std::string empty;
  return empty;
}

}  // namespace

std::string Object::repr() const {
  std::string out = "<";
  out += type_name();
  out += " object>";
  return out;
}

Value Object::get_attribute(const std::string& name) const {
  std::string hint = "'";
  hint += type_name();
  hint += " object' has no attribute '";
  hint += name;
  hint += "'";
  return Value::undefined(std::move(hint));
}

Value Object::call(const CallArgs&, Renderer&) {
  throw TemplateError("'" + type_name() + "' object is not callable");
}

std::vector<Value> Object::consume() {
  throw TemplateError("'" + type_name() + "' object is not iterable");
}

bool Object::next(Value*) {
  throw TemplateError("'" + type_name() + "' object is not an iterator");
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  if (!string_index.empty()) {
    auto it = string_index.find(key);
    return it == string_index.end() ? nullptr : &entries[it->second].second;
  }
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.data_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = ValueKind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = ValueKind::kBool;
  v.int_ = 0;
  v.bool_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = ValueKind::kInt;
  v.int_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = ValueKind::kFloat;
  v.float_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = ValueKind::kString;
  v.data_ = std::make_shared<std::string>(std::move(s));
  return v;
}

uint32_t value_depth(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kList:
      return v.as_list().depth;
    case ValueKind::kDict:
      return v.as_dict().depth;
    case ValueKind::kObject:
      return v.as_object().nesting_depth();
    default:
      return 0;
  }
}

void check_value_depth(uint32_t depth) {
  if (depth > kMaxValueDepth) throw TemplateError("value nested too deeply (limit 1000 levels)");
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  uint32_t depth = 0;
  for (const Value& item : items) depth = std::max(depth, value_depth(item));
  check_value_depth(depth + 1);
  Value v;
  v.kind_ = ValueKind::kList;
  auto data = std::make_shared<ListData>();
  data->depth = depth + 1;
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  v.data_ = std::move(data);
  return v;
}

Value Value::dict_view(std::vector<Value> items, DictView view) {
  Value v = list(std::move(items));
  std::static_pointer_cast<ListData>(v.data_)->view = view;
  return v;
}

Value Value::range(int64_t start, int64_t stop, int64_t step, std::vector<Value> items) {
  Value v = list(std::move(items));
  auto data = std::static_pointer_cast<ListData>(v.data_);
  data->view = DictView::kRange;
  data->range_start = start;
  data->range_stop = stop;
  data->range_step = step;
  return v;
}

Value Value::dict(std::vector<std::pair<Value, Value>> entries) {
  uint32_t depth = 0;
  for (const auto& [key, item] : entries) depth = std::max({depth, value_depth(key), value_depth(item)});
  check_value_depth(depth + 1);
  Value v;
  v.kind_ = ValueKind::kDict;
  auto data = std::make_shared<DictData>();
  data->depth = depth + 1;
  data->entries = std::move(entries);
  if (data->entries.size() > DictData::kIndexedDictSize) {
    for (size_t i = 0; i < data->entries.size(); ++i)
      if (data->entries[i].first.is_string())
        data->string_index.emplace(data->entries[i].first.as_string(), i);
  }
  v.data_ = std::move(data);
  return v;
}

Value Value::object(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = ValueKind::kObject;
  v.data_ = std::move(object);
  return v;
}

Value Value::function(std::string name, std::function<Value(const CallArgs&, Renderer&)> fn,
                      const Value& bound_to) {
  uint32_t depth = value_depth(bound_to) + 1;
  check_value_depth(depth);
  return object(std::make_shared<NativeFunction>(std::move(name), std::move(fn), depth));
}

const std::string& Value::undefined_hint() const {
  if (!is_undefined() || !data_) return empty_string();
  return *static_cast<const std::string*>(data_.get());
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return "Undefined";
    case ValueKind::kNone:
      return "NoneType";
    case ValueKind::kBool:
      return "bool";
    case ValueKind::kInt:
      return "int";
    case ValueKind::kFloat:
      return "float";
    case ValueKind::kString:
      return "str";
    case ValueKind::kList:
      switch (v.as_list().view) {
        case DictView::kKeys:
          return "dict_keys";
        case DictView::kValues:
          return "dict_values";
        case DictView::kItems:
          return "dict_items";
        case DictView::kRange:
          return "range";
        case DictView::kNone:
          break;
      }
      return v.as_list().is_tuple ? "tuple" : "list";
    case ValueKind::kDict:
      return "dict";
    case ValueKind::kObject:
      return v.as_object().type_name();
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return false;
    case ValueKind::kBool:
      return v.as_bool();
    case ValueKind::kInt:
      return v.as_int() != 0;
    case ValueKind::kFloat:
      return v.as_double() != 0.0;
    case ValueKind::kString:
      return !v.as_string().empty();
    case ValueKind::kList:
      return !v.as_list().items.empty();
    case ValueKind::kDict:
      return !v.as_dict().entries.empty();
    case ValueKind::kObject:
      return true;
  }
  return false;
}

size_t hash_value(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kBool:
    case ValueKind::kInt:
      return std::hash<int64_t>{}(v.as_int());
    case ValueKind::kFloat: {
      double d = v.as_double();
      if (d == static_cast<double>(static_cast<int64_t>(d)) && d > -9.2e18 && d < 9.2e18)
        return std::hash<int64_t>{}(static_cast<int64_t>(d));
      return std::hash<double>{}(d);
    }
    case ValueKind::kString:
      return std::hash<std::string>{}(v.as_string());
    case ValueKind::kList: {
      size_t h = 0x9e3779b97f4a7c15ull;
      for (const Value& item : v.as_list().items) h = (h ^ hash_value(item)) * 0x100000001b3ull;
      return h;
    }
    case ValueKind::kObject:
      return std::hash<const void*>{}(v.identity());
    default:
      return 0;
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case ValueKind::kUndefined:
    case ValueKind::kNone:
      return true;
    case ValueKind::kString:
      return a.as_string() == b.as_string();
    case ValueKind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.view != y.view || x.items.size() != y.items.size()) return false;
      if (x.view == DictView::kValues) return &x == &y;  // dict_values compare by identity
      if (x.view != DictView::kNone) {                   // keys and items views compare as sets
        for (const Value& item : x.items) {
          bool found = false;
          for (const Value& other : y.items) found = found || equals(item, other);
          if (!found) return false;
        }
        return true;
      }
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case ValueKind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case ValueKind::kObject:
      return a.identity() == b.identity();
    default:
      return false;
  }
}

}  // namespace lmx::jinja
