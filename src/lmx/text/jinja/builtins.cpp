// Global functions every template sees: range, namespace, dict, joiner, and transformers' raise_exception and
// strftime_now.
#include "lmx/text/jinja/builtins.h"

#include "lmx/text/jinja/budget.h"
#include "lmx/text/jinja/call_args.h"
#include "lmx/text/jinja/renderer.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/value_format.h"
#include "lmx/text/jinja/value_ops.h"

#include <ctime>

namespace lmx::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Value builtin_range(const CallArgs& args, Renderer&) {
  if (!args.keyword.empty()) throw TemplateError("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3)
    throw TemplateError("range expected at most 3 arguments, got " + std::to_string(p.size()));
  int64_t start = 0, stop, step = 1;
  if (p.size() == 1) {
    stop = arg_int(p[0], "range");
  } else {
    start = arg_int(p[0], "range");
    stop = arg_int(p[1], "range");
    if (p.size() == 3) step = arg_int(p[2], "range");
  }
  if (step == 0) throw TemplateError("range() arg 3 must not be zero");
  __int128 count = 0;
  if (step > 0 && start < stop) count = (static_cast<__int128>(stop) - start + step - 1) / step;
  if (step < 0 && start > stop) count = (static_cast<__int128>(start) - stop - step - 1) / -step;
  if (count > kMaxRange)
    throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  charge_bytes(static_cast<size_t>(count) * sizeof(Value));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.push_back(Value::integer(start + i * step));
  return Value::range(start, stop, step, std::move(items));
}

void add_pairs(NamespaceObject& ns, const Value& source) {
  if (source.is_dict()) {
    for (const auto& [k, v] : source.as_dict().entries) ns.set(to_str(k), v);
    return;
  }
  for (const Value& item : iterate(source)) {
    std::vector<Value> pair = iterate(item);
    if (pair.size() != 2)
      throw TemplateError("dictionary update sequence element has length " + std::to_string(pair.size()) +
                          "; 2 is required");
    ns.set(to_str(pair[0]), pair[1]);
  }
}

Value builtin_namespace(const CallArgs& args, Renderer& renderer) {
  if (args.positional.size() > 1)
    throw TemplateError("namespace expected at most 1 argument, got " +
                        std::to_string(args.positional.size()));
  auto ns = std::make_shared<NamespaceObject>();
  if (!args.positional.empty()) add_pairs(*ns, args.positional[0]);
  for (const auto& [key, value] : args.keyword) ns->set(key, value);
  renderer.track_object(ns);
  return Value::object(ns);
}

Value builtin_dict(const CallArgs& args, Renderer&) {
  if (args.positional.size() > 1)
    throw TemplateError("dict expected at most 1 argument, got " + std::to_string(args.positional.size()));
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_multimap<size_t, size_t> by_hash;  // key hash -> index in entries
  auto put = [&](const Value& k, const Value& v) {
    require_hashable(k);
    size_t h = hash_value(k);
    auto [first, last] = by_hash.equal_range(h);
    for (auto it = first; it != last; ++it) {
      if (equals(entries[it->second].first, k)) {
        entries[it->second].second = v;
        return;
      }
    }
    by_hash.emplace(h, entries.size());
    entries.emplace_back(k, v);
  };
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      for (const auto& [k, v] : source.as_dict().entries) put(k, v);
    } else {
      for (const Value& item : iterate(source)) {
        std::vector<Value> pair = iterate(item);
        if (pair.size() != 2)
          throw TemplateError("dictionary update sequence element has length " + std::to_string(pair.size()) +
                              "; 2 is required");
        put(pair[0], pair[1]);
      }
    }
  }
  for (const auto& [key, value] : args.keyword) put(Value::string(key), value);
  return Value::dict(std::move(entries));
}

Value builtin_raise_exception(const CallArgs& args, Renderer&) {
  BoundArgs bound(args, "raise_exception", {"message"}, 1);
  throw TemplateError(to_str(bound.get(0)));
}

Value builtin_strftime_now(const CallArgs& args, Renderer&) {
  BoundArgs bound(args, "strftime_now", {"format"}, 1);
  const std::string& format = arg_string(bound.get(0), "strftime_now");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out(256 + format.size() * 8, '\0');
  size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
  out.resize(n);
  return Value::string(std::move(out));
}

class Joiner : public Object {
 public:
  explicit Joiner(std::string separator) : separator_(std::move(separator)) {}
  std::string type_name() const override { return "Joiner"; }
  bool is_callable() const override { return true; }
  Value call(const CallArgs&, Renderer&) override {
    if (!used_) {
      used_ = true;
      return Value::string("");
    }
    return Value::string(separator_);
  }

 private:
  std::string separator_;
  bool used_ = false;
};

Value builtin_joiner(const CallArgs& args, Renderer&) {
  BoundArgs bound(args, "joiner", {"sep"});
  return Value::object(std::make_shared<Joiner>(bound.has(0) ? to_str(bound.get(0)) : ", "));
}

}  // namespace

std::string NamespaceObject::repr() const {
  std::string out = "<Namespace {";
  for (size_t i = 0; i < attributes_.size(); ++i) {
    if (i) out += ", ";
    out += string_repr(attributes_[i].first) + ": " + to_repr(attributes_[i].second);
  }
  return out + "}>";
}

Value NamespaceObject::get_attribute(const std::string& name) const {
  auto it = index_.find(name);
  if (it != index_.end()) return attributes_[it->second].second;
  return Value::undefined("'Namespace object' has no attribute '" + name + "'");
}

void NamespaceObject::set(const std::string& name, Value value) {
  auto [it, inserted] = index_.emplace(name, attributes_.size());
  if (!inserted) {
    attributes_[it->second].second = std::move(value);
    return;
  }
  attributes_.emplace_back(name, std::move(value));
}

std::vector<std::pair<std::string, Value>> make_builtins() {
  return {
      {"range", Value::function("range", builtin_range)},
      {"namespace", Value::function("namespace", builtin_namespace)},
      {"dict", Value::function("dict", builtin_dict)},
      {"joiner", Value::function("joiner", builtin_joiner)},
      {"raise_exception", Value::function("raise_exception", builtin_raise_exception)},
      {"strftime_now", Value::function("strftime_now", builtin_strftime_now)},
  };
}

}  // namespace lmx::jinja
