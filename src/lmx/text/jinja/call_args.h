// Binding of call arguments to Python-style signatures for builtins, filters, tests and methods.
#pragma once

#include "lmx/text/jinja/value.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lmx::jinja {

// Binds positional and keyword arguments to the named parameters of `function`, Python style:
// positionals fill parameters in order, keywords by name. Throws TemplateError for too many
// positionals, unknown or repeated keywords, or a missing one of the first `required`. With
// `allow_extra_positional`, positionals beyond the parameters are kept in extra().
class BoundArgs {
 public:
  BoundArgs(const CallArgs& args, std::string_view function, std::initializer_list<std::string_view> params,
            size_t required = 0, bool allow_extra_positional = false);

  bool has(size_t i) const { return i < values_.size() && values_[i].has_value(); }
  // True when present and not None (Python's "x is not None" default handling).
  bool given(size_t i) const { return has(i) && !values_[i]->is_none(); }
  const Value& get(size_t i) const;  // undefined when absent
  Value get_or(size_t i, Value fallback) const { return has(i) ? *values_[i] : fallback; }
  const std::vector<Value>& extra() const { return extra_; }

 private:
  std::vector<std::optional<Value>> values_;
  std::vector<Value> extra_;
};

// Argument conversions with Python's TypeError messages.
int64_t arg_int(const Value& v, std::string_view function);
const std::string& arg_string(const Value& v, std::string_view function);

}  // namespace lmx::jinja
