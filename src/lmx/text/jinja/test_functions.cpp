// Jinja tests (`value is name(args)`): defined, none, string, mapping, equalto, ... as Jinja2 defines them.
#include "lmx/text/jinja/test_functions.h"

#include "lmx/text/jinja/call_args.h"
#include "lmx/text/jinja/filters.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"
#include "lmx/text/jinja/value_ops.h"

namespace lmx::jinja {
namespace {

const Value& other(const CallArgs& a, const char* name) {
  if (a.positional.size() + a.keyword.size() != 1)
    throw TemplateError(std::string(name) + "() takes exactly one argument (" +
                        std::to_string(a.positional.size() + a.keyword.size()) + " given)");
  return a.positional.empty() ? a.keyword[0].second : a.positional[0];
}

void no_args(const CallArgs& a, const char* name) {
  if (!a.positional.empty() || !a.keyword.empty())
    throw TemplateError(std::string(name) + "() takes no arguments");
}

bool t_defined(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "defined"), !v.is_undefined();
}
bool t_undefined(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "undefined"), v.is_undefined();
}
bool t_none(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "none"), v.is_none();
}
bool t_boolean(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "boolean"), v.is_bool();
}
bool t_true(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "true"), v.is_bool() && v.as_bool();
}
bool t_false(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "false"), v.is_bool() && !v.as_bool();
}
bool t_integer(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "integer"), v.is_int();
}
bool t_float(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "float"), v.is_float();
}
bool t_number(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "number"), v.is_number();
}
bool t_string(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "string"), v.is_string();
}
bool t_mapping(const Value& v, const CallArgs& a, Renderer&) {
  return no_args(a, "mapping"), v.is_dict();
}
bool t_escaped(const Value&, const CallArgs& a, Renderer&) {
  return no_args(a, "escaped"), false;
}

// Python iter() succeeds: containers, strings, undefined (iterates as empty), loop contexts.
bool t_iterable(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "iterable");
  return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() ||
         (v.is_object() && (v.as_object().is_iterator() || v.as_object().type_name() == "LoopContext"));
}

// Has __len__ and __getitem__: strings, lists, dicts and (as in Jinja) undefined.
bool t_sequence(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "sequence");
  return v.is_string() || v.is_sequence_list() || v.is_dict() || v.is_undefined();
}

bool t_callable(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "callable");
  return v.is_object() && v.as_object().is_callable();
}

bool t_sameas(const Value& v, const CallArgs& a, Renderer&) {
  const Value& o = other(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return false;
    case ValueKind::kNone:
      return true;
    case ValueKind::kBool:
    case ValueKind::kInt:
    case ValueKind::kFloat:
      return equals(v, o);
    default:
      return v.identity() == o.identity();
  }
}

Value checked_mod(const Value& v, const Value& divisor) {
  return binary_op(BinaryOp::kMod, v, divisor);
}

bool t_odd(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "odd");
  return equals(checked_mod(v, Value::integer(2)), Value::integer(1));
}
bool t_even(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "even");
  return equals(checked_mod(v, Value::integer(2)), Value::integer(0));
}
bool t_divisibleby(const Value& v, const CallArgs& a, Renderer&) {
  return equals(checked_mod(v, other(a, "divisibleby")), Value::integer(0));
}

bool t_lower(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "lower");
  std::string s = to_str(v);
  bool cased = false;
  for (char32_t c : unicode::decode(s)) {
    if (unicode::to_lower(c) != c) return false;
    if (unicode::to_upper(c) != c) cased = true;
  }
  return cased;
}
bool t_upper(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "upper");
  std::string s = to_str(v);
  bool cased = false;
  for (char32_t c : unicode::decode(s)) {
    if (unicode::to_upper(c) != c) return false;
    if (unicode::to_lower(c) != c) cased = true;
  }
  return cased;
}

bool t_eq(const Value& v, const CallArgs& a, Renderer&) {
  return equals(v, other(a, "eq"));
}
bool t_ne(const Value& v, const CallArgs& a, Renderer&) {
  return !equals(v, other(a, "ne"));
}
bool t_lt(const Value& v, const CallArgs& a, Renderer&) {
  return less_than(v, other(a, "lt"));
}
bool t_gt(const Value& v, const CallArgs& a, Renderer&) {
  return less_than(other(a, "gt"), v);
}
bool t_le(const Value& v, const CallArgs& a, Renderer&) {
  const Value& o = other(a, "le");
  return equals(v, o) || less_than(v, o);
}
bool t_ge(const Value& v, const CallArgs& a, Renderer&) {
  const Value& o = other(a, "ge");
  return equals(v, o) || less_than(o, v);
}
bool t_in(const Value& v, const CallArgs& a, Renderer&) {
  return contains(other(a, "in"), v);
}

bool t_filter(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "filter");
  return v.is_string() && find_filter(v.as_string()) != nullptr;
}
bool t_test(const Value& v, const CallArgs& a, Renderer&) {
  no_args(a, "test");
  return v.is_string() && find_test(v.as_string()) != nullptr;
}

const TestSpec kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

}  // namespace

const TestSpec* find_test(std::string_view name) {
  for (const TestSpec& spec : kTests)
    if (name == spec.name) return &spec;
  return nullptr;
}

std::vector<std::string_view> test_names() {
  std::vector<std::string_view> names;
  for (const TestSpec& spec : kTests) names.push_back(spec.name);
  return names;
}

}  // namespace lmx::jinja
