// Python methods of str, dict and list that Jinja's immutable sandbox lets templates call.
#pragma once

#include "lmx/text/jinja/value.h"

#include <optional>
#include <string>
#include <vector>

namespace lmx::jinja {

// The bound method `receiver.name` as a function value; nullopt when the type has no such
// method. Mutating methods (list.append, dict.update, ...) give an undefined whose use fails
// with the sandbox's "access to attribute ... is unsafe" message.
std::optional<Value> find_method(const Value& receiver, const std::string& name);

// Python str.split / str.rsplit (sep == nullptr splits on whitespace runs).
std::vector<std::string> python_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                      bool from_right);

// Python str.replace; count < 0 replaces all.
std::string python_replace(const std::string& s, const std::string& old, const std::string& replacement,
                           int64_t count);

// Python str.title and str.capitalize.
std::string python_title(const std::string& s);
std::string python_capitalize(const std::string& s);

// Python str.format with automatic ({}) or numbered ({0}) and named ({name}) fields and !r/!s
// conversions; format specs are not supported (TemplateError).
std::string python_str_format(const std::string& format, const CallArgs& args);

}  // namespace lmx::jinja
