// Python printf-style string formatting ("%s items" % n), used by the format filter.
#pragma once

#include "lmx/text/jinja/value.h"

#include <string>

namespace lmx::jinja {

// Python `format % args`: args is a tuple (positional values), a dict (for %(name)s fields) or a
// single value. Supports conversions s r a d i u o x X e E f F g G c % with flags (-+ #0),
// width and precision; throws TemplateError with Python's messages on mismatched arguments.
std::string python_percent_format(const std::string& format, const Value& args);

}  // namespace lmx::jinja
