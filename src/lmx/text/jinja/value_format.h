// Python str() and repr() of interpreter values, byte-exact for data (None, bools, numbers, str, list, dict).
#pragma once

#include "lmx/text/jinja/value.h"

#include <string>

namespace lmx::jinja {

// Python str(v) as Jinja prints it: undefined prints "", None "None", True "True", floats as
// repr (shortest round trip: 0.1, 1e-05, 1e+16), lists and dicts as their repr.
std::string to_str(const Value& v);
// Python repr(v): strings quoted and escaped ('a', "it's"), containers recursively.
std::string to_repr(const Value& v);
// Python float.__repr__: "1.0", "0.30000000000000004", "1e+16", "inf", "nan", "-0.0".
std::string float_repr(double d);
// Python repr of a str.
std::string string_repr(const std::string& s);

}  // namespace lmx::jinja
