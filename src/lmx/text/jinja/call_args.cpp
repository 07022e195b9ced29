// Binding of call arguments to Python-style signatures for builtins, filters, tests and methods.
#include "lmx/text/jinja/call_args.h"

#include "lmx/text/jinja/template_error.h"

namespace lmx::jinja {

BoundArgs::BoundArgs(const CallArgs& args, std::string_view function,
                     std::initializer_list<std::string_view> params, size_t required,
                     bool allow_extra_positional) {
  std::vector<std::string_view> names(params);
  values_.resize(names.size());
  const std::string fn(function);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < names.size()) {
      values_[i] = args.positional[i];
    } else if (allow_extra_positional) {
      extra_.push_back(args.positional[i]);
    } else {
      throw TemplateError(fn + "() takes at most " + std::to_string(names.size()) + " argument" +
                          (names.size() == 1 ? "" : "s") + " (" + std::to_string(args.positional.size()) +
                          " given)");
    }
  }
  for (const auto& [key, value] : args.keyword) {
    size_t index = names.size();
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == key) index = i;
    if (index == names.size())
      throw TemplateError(fn + "() got an unexpected keyword argument '" + key + "'");
    if (values_[index]) throw TemplateError(fn + "() got multiple values for argument '" + key + "'");
    values_[index] = value;
  }
  for (size_t i = 0; i < required && i < names.size(); ++i)
    if (!values_[i]) throw TemplateError(fn + "() missing required argument '" + std::string(names[i]) + "'");
}

const Value& BoundArgs::get(size_t i) const {
  static const Value kUndefined;
  return has(i) ? *values_[i] : kUndefined;
}

int64_t arg_int(const Value& v, std::string_view function) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  throw TemplateError(std::string(function) + "(): '" + type_name(v) +
                      "' object cannot be interpreted as an integer");
}

const std::string& arg_string(const Value& v, std::string_view function) {
  if (v.is_string()) return v.as_string();
  throw TemplateError(std::string(function) + "() argument must be str, not " + type_name(v));
}

}  // namespace lmx::jinja
