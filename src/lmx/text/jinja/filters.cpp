// Jinja filters (`value | name(args)`): Jinja2's builtins that chat templates use, plus transformers' tojson.
#include "lmx/text/jinja/filters.h"

#include "lmx/text/jinja/budget.h"
#include "lmx/text/jinja/call_args.h"
#include "lmx/text/jinja/iterator.h"
#include "lmx/text/jinja/json_convert.h"
#include "lmx/text/jinja/methods.h"
#include "lmx/text/jinja/printf_format.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/test_functions.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"
#include "lmx/text/jinja/value_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

namespace lmx::jinja {
namespace {

// Jinja's soft_str: strings unchanged, anything else through str().
std::string soft_str(const Value& v) {
  return v.is_string() ? v.as_string() : to_str(v);
}

Value str_value(std::string s) {
  charge_bytes(s.size());
  return Value::string(std::move(s));
}

// Jinja's ignore_case postprocess: lower-case strings, leave the rest.
Value ignore_case(const Value& v) {
  return v.is_string() ? Value::string(unicode::lower(v.as_string())) : v;
}

// Jinja's make_attrgetter: "a.b.0" looks up item a, then b, then index 0 (item first, then
// attribute); `fallback` replaces an undefined result of any step.
Value attribute_path(const Value& item, const Value& attribute, const Value* fallback) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    const std::string& path = attribute.as_string();
    size_t start = 0;
    while (true) {
      size_t dot = path.find('.', start);
      std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      bool numeric =
          !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(numeric && part.size() < 18 ? Value::integer(std::stoll(part)) : Value::string(part));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  Value current = item;
  for (const Value& part : parts) {
    current = get_item(current, part);
    if (fallback && current.is_undefined()) current = *fallback;
  }
  return current;
}

Value call_filter_by_name(const Value& name, const Value& input, const CallArgs& args, Renderer& r) {
  const FilterSpec* filter = name.is_string() ? find_filter(name.as_string()) : nullptr;
  if (!filter) throw TemplateError("No filter named " + to_repr(name) + ".");
  return filter->function(input, args, r);
}

bool call_test_by_name(const Value& name, const Value& input, const CallArgs& args, Renderer& r) {
  const TestSpec* test = name.is_string() ? find_test(name.as_string()) : nullptr;
  if (!test) throw TemplateError("No test named " + to_repr(name) + ".");
  return test->function(input, args, r);
}

// A strict-weak "<" usable by stable_sort that throws Python's TypeError for unorderable values.
bool python_less(const Value& a, const Value& b) {
  return less_than(a, b);
}

// ---- strings ------------------------------------------------------------------------------------

Value f_upper(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "upper", {});
  return str_value(unicode::upper(soft_str(v)));
}
Value f_lower(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "lower", {});
  return str_value(unicode::lower(soft_str(v)));
}
Value f_capitalize(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "capitalize", {});
  return str_value(python_capitalize(soft_str(v)));
}

Value f_title(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "title", {});
  // Jinja splits on runs of [-\s({[<] and capitalizes every piece.
  std::u32string cps = unicode::decode(soft_str(v));
  auto is_delimiter = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || unicode::is_space(c);
  };
  std::u32string out;
  size_t i = 0;
  while (i < cps.size()) {
    bool delim = is_delimiter(cps[i]);
    size_t j = i;
    while (j < cps.size() && is_delimiter(cps[j]) == delim) ++j;
    for (size_t k = i; k < j; ++k)
      out.push_back(k == i ? unicode::to_upper(cps[k]) : unicode::to_lower(cps[k]));
    i = j;
  }
  return str_value(unicode::encode(out));
}

Value f_trim(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "trim", {"chars"});
  std::string chars;
  const std::string* chars_ptr = nullptr;
  if (args.given(0)) {
    chars = soft_str(args.get(0));
    chars_ptr = &chars;
  }
  return str_value(unicode::strip(soft_str(v), chars_ptr, true, true));
}

Value f_replace(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "replace", {"old", "new", "count"}, 2);
  int64_t count = args.given(2) ? arg_int(args.get(2), "replace") : -1;
  return str_value(python_replace(soft_str(v), soft_str(args.get(0)), soft_str(args.get(1)), count));
}

Value f_string(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "string", {});
  return str_value(soft_str(v));
}

Value f_escape(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "escape", {});
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return str_value(std::move(out));
}

Value f_center(const Value& v, const CallArgs& a, Renderer& r) {
  BoundArgs args(a, "center", {"width"});
  CallArgs inner;
  inner.positional.push_back(args.get_or(0, Value::integer(80)));
  return find_method(Value::string(soft_str(v)), "center")->as_object().call(inner, r);
}

Value f_indent(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "indent", {"width", "first", "blank"});
  Value width = args.get_or(0, Value::integer(4));
  std::string indention;
  if (width.is_string()) {
    indention = width.as_string();
  } else {
    int64_t n = arg_int(width, "indent");
    if (n > 10000) throw TemplateError("indent width too large");
    indention = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
  }
  bool first = truthy(args.get(1));
  bool blank = truthy(args.get(2));
  // Jinja does `s += "\n"` then s.splitlines(): only strings get through.
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_list()) throw TemplateError("'" + type_name(v) + "' object has no attribute 'splitlines'");
  if (!v.is_string())
    throw TemplateError("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");
  std::string s = v.as_string() + "\n";
  // str.splitlines on the text plus the trailing newline Jinja appends.
  std::vector<std::string> lines;
  {
    std::u32string cps = unicode::decode(s);
    size_t start = 0;
    for (size_t i = 0; i < cps.size(); ++i) {
      char32_t c = cps[i];
      bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                 c == 0x85 || c == 0x2028 || c == 0x2029;
      if (!brk) continue;
      lines.push_back(unicode::encode(cps.substr(start, i - start)));
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
      start = i + 1;
    }
    if (start < cps.size()) lines.push_back(unicode::encode(cps.substr(start)));
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += '\n';
      if (!lines[i].empty()) rv += indention + lines[i];
    }
  }
  if (first) rv = indention + rv;
  return str_value(std::move(rv));
}

Value f_truncate(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "truncate", {"length", "killwords", "end", "leeway"});
  int64_t length = args.given(0) ? arg_int(args.get(0), "truncate") : 255;
  bool killwords = truthy(args.get(1));
  std::string end = args.given(2) ? soft_str(args.get(2)) : "...";
  int64_t leeway = args.given(3) ? arg_int(args.get(3), "truncate") : 5;
  int64_t end_len = static_cast<int64_t>(unicode::length(end));
  if (length < end_len)
    throw TemplateError("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) throw TemplateError("expected leeway >= 0, got " + std::to_string(leeway));
  if (python_len(v) <= length + leeway) return v;  // Jinja returns the input itself, string or not
  if (!v.is_string()) {
    Value stop = Value::integer(length - end_len);
    return binary_op(BinaryOp::kAdd, get_slice(v, nullptr, &stop, nullptr), Value::string(end));
  }
  std::u32string s = unicode::decode(v.as_string());
  std::u32string head = s.substr(0, static_cast<size_t>(length - end_len));
  if (killwords) return str_value(unicode::encode(head) + end);
  size_t space = head.rfind(U' ');
  if (space != std::u32string::npos) head = head.substr(0, space);
  return str_value(unicode::encode(head) + end);
}

Value f_wordcount(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "wordcount", {});
  int64_t count = 0;
  bool in_word = false;
  for (char32_t c : unicode::decode(soft_str(v))) {
    bool word = unicode::is_alnum(c) || c == '_';
    if (word && !in_word) ++count;
    in_word = word;
  }
  return Value::integer(count);
}

Value f_format(const Value& v, const CallArgs& a, Renderer&) {
  if (!a.positional.empty() && !a.keyword.empty())
    throw TemplateError("can't handle positional and keyword arguments at the same time");
  Value args;
  if (!a.keyword.empty()) {
    std::vector<std::pair<Value, Value>> entries;
    for (const auto& [k, value] : a.keyword) entries.emplace_back(Value::string(k), value);
    args = Value::dict(std::move(entries));
  } else {
    args = Value::list(a.positional, true);
  }
  return str_value(python_percent_format(soft_str(v), args));
}

Value f_safe(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "safe", {});
  return str_value(soft_str(v));
}

// ---- JSON ---------------------------------------------------------------------------------------

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys). (Jinja's own tojson, which HTML-escapes <>&', is replaced by it.)
Value f_tojson(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = truthy(args.get(0));
  if (args.given(1)) {
    const Value& indent = args.get(1);
    if (indent.is_string()) {
      options.indent = indent.as_string();
    } else {
      int64_t n = arg_int(indent, "tojson");
      if (n > 10000) throw TemplateError("tojson indent too large");
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
  }
  if (args.given(2)) {
    std::vector<Value> separators = iterate(args.get(2));
    if (separators.size() != 2 || !separators[0].is_string() || !separators[1].is_string())
      throw TemplateError("tojson separators must be a pair of strings");
    options.item_separator = separators[0].as_string();
    options.key_separator = separators[1].as_string();
  }
  options.sort_keys = truthy(args.get(3));
  return str_value(python_json_dumps(v, options));
}

// ---- numbers ------------------------------------------------------------------------------------

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
bool parse_python_int(const std::string& text, int base, int64_t* out) {
  std::string s = unicode::strip(text, nullptr, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (base == 0 || base == 16 || base == 8 || base == 2) {
    if (i + 1 < s.size() && s[i] == '0') {
      char p = static_cast<char>(s[i + 1] | 0x20);
      int prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
      if (prefix_base && (base == 0 || base == prefix_base)) {
        base = prefix_base;
        i += 2;
        if (i < s.size() && s[i] == '_') ++i;
      }
    }
    if (base == 0) base = 10;
  }
  if (i >= s.size()) return false;
  unsigned __int128 value = 0;
  bool last_underscore = true;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (last_underscore) return false;
      last_underscore = true;
      continue;
    }
    int d = c >= '0' && c <= '9'                     ? c - '0'
            : (c | 0x20) >= 'a' && (c | 0x20) <= 'z' ? (c | 0x20) - 'a' + 10
                                                     : 99;
    if (d >= base) return false;
    value = value * static_cast<unsigned>(base) + static_cast<unsigned>(d);
    if (value > static_cast<unsigned __int128>(INT64_MAX) + 1) throw TemplateError("integer too large");
    last_underscore = false;
  }
  if (last_underscore) return false;
  if (!negative && value > static_cast<unsigned __int128>(INT64_MAX))
    throw TemplateError("integer too large");
  *out = negative ? static_cast<int64_t>(-static_cast<__int128>(value)) : static_cast<int64_t>(value);
  return true;
}

// Python float(str): strtod on the stripped text, accepting inf/nan spellings and underscores.
bool parse_python_float(const std::string& text, double* out) {
  std::string s = unicode::strip(text, nullptr, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return false;
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return false;
  std::string lower = unicode::lower(clean);
  std::string body = lower[0] == '+' || lower[0] == '-' ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double value = body == "nan" ? NAN : INFINITY;
    *out = lower[0] == '-' ? -value : value;
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  *out = std::strtod(clean.c_str(), &end);
  return end && *end == '\0';
}

Value f_int(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "int", {"default", "base"});
  Value fallback = args.get_or(0, Value::integer(0));
  int base = args.has(1) ? static_cast<int>(arg_int(args.get(1), "int")) : 10;
  int64_t result;
  if (v.is_string()) {
    if (parse_python_int(v.as_string(), base, &result)) return Value::integer(result);
    double d;
    if (parse_python_float(v.as_string(), &d)) {
      if (!std::isfinite(d)) throw TemplateError("cannot convert float infinity or NaN to integer");
      if (std::fabs(d) >= 9.2e18) throw TemplateError("integer too large");
      return Value::integer(static_cast<int64_t>(d));
    }
    return fallback;
  }
  if (v.is_bool() || v.is_int()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_double();
    if (!std::isfinite(d)) throw TemplateError("cannot convert float infinity or NaN to integer");
    if (std::fabs(d) >= 9.2e18) throw TemplateError("integer too large");
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_undefined()) fail_undefined(v);
  return fallback;
}

Value f_float(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "float", {"default"});
  Value fallback = args.get_or(0, Value::number(0.0));
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    double d;
    if (parse_python_float(v.as_string(), &d)) return Value::number(d);
    return fallback;
  }
  if (v.is_undefined()) fail_undefined(v);
  return fallback;
}

Value f_abs(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "abs", {});
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw TemplateError("integer overflow (lmx integers are 64-bit)");
    return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  throw TemplateError("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_round(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "round", {"precision", "method"});
  int64_t precision = args.has(0) ? arg_int(args.get(0), "round") : 0;
  std::string method = args.has(1) ? soft_str(args.get(1)) : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    throw TemplateError("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) throw TemplateError("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (!v.is_float()) {
      if (precision >= 0) return Value::integer(v.as_int());
      int64_t scale = 1;
      for (int64_t i = 0; i < -precision && scale < INT64_MAX / 10; ++i) scale *= 10;
      int64_t x = v.as_int();
      int64_t q = x / scale, rem = x % scale;
      if (rem < 0) {
        rem += scale;
        q -= 1;
      }
      if (rem * 2 > scale || (rem * 2 == scale && (q & 1))) ++q;  // half to even
      return Value::integer(q * scale);
    }
    double d = v.as_double();
    if (!std::isfinite(d)) return Value::number(d);
    if (precision > 300) return Value::number(d);
    if (precision < -308) return Value::number(0.0 * d);
    if (precision >= 0) {
      char buf[400];
      std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), d);  // exact, ties to even
      return Value::number(std::strtod(buf, nullptr));
    }
    double scale = std::pow(10.0, static_cast<double>(-precision));
    double y = d / scale;
    double rounded = std::nearbyint(y);
    return Value::number(rounded * scale);
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * scale;
  double r = method == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::number(r / scale);
}

// ---- sequences ----------------------------------------------------------------------------------

Value f_length(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "length", {});
  return Value::integer(python_len(v));
}

Value f_list(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "list", {});
  std::vector<Value> items = iterate(v);
  charge_bytes(items.size() * sizeof(Value));
  return Value::list(std::move(items));
}

Value f_first(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "first", {});
  if (v.is_object() && v.as_object().is_iterator()) {
    Value item;
    if (v.as_object().next(&item)) return item;
    return Value::undefined("No first item, sequence was empty.");
  }
  if (v.is_string()) {
    if (v.as_string().empty()) return Value::undefined("No first item, sequence was empty.");
    return get_item(v, Value::integer(0));
  }
  if (v.is_list() && !v.as_list().items.empty()) return v.as_list().items.front();
  if (v.is_dict() && !v.as_dict().entries.empty()) return v.as_dict().entries.front().first;
  if (v.is_list() || v.is_dict() || v.is_undefined())
    return Value::undefined("No first item, sequence was empty.");
  throw TemplateError("'" + type_name(v) + "' object is not iterable");
}

Value f_last(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "last", {});
  if (v.is_string()) {
    if (v.as_string().empty()) return Value::undefined("No last item, sequence was empty.");
    return get_item(v, Value::integer(-1));
  }
  if (v.is_list() && !v.as_list().items.empty()) return v.as_list().items.back();
  if (v.is_dict() && !v.as_dict().entries.empty()) return v.as_dict().entries.back().first;
  if (v.is_list() || v.is_dict() || v.is_undefined())
    return Value::undefined("No last item, sequence was empty.");
  throw TemplateError("'" + type_name(v) + "' object is not reversible");
}

Value f_reverse(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "reverse", {});
  if (v.is_string()) {
    Value step = Value::integer(-1);
    return get_slice(v, nullptr, nullptr, &step);
  }
  // Jinja returns reversed(value), an iterator, when Python can reverse the value, else a list.
  if (v.is_list() || v.is_dict() || v.is_undefined()) {
    std::vector<Value> items = iterate(v);
    std::reverse(items.begin(), items.end());
    std::string type = v.is_dict()                            ? "dict_reversekeyiterator"
                       : v.is_undefined()                     ? "reversed"
                       : v.is_tuple()                         ? "reversed"
                       : v.is_dict_view()                     ? "dict_reverseiterator"
                       : v.as_list().view == DictView::kRange ? "range_iterator"
                                                              : "list_reverseiterator";
    uint32_t depth = value_depth(v) + 1;
    return Value::object(std::make_shared<IteratorObject>(
        type, "reverse", [items = std::move(items)]() mutable { return std::move(items); }, depth));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_join(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "join", {"d", "attribute"});
  std::string separator = args.has(0) ? soft_str(args.get(0)) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += separator;
    first = false;
    out += to_str(args.given(1) ? attribute_path(item, args.get(1), nullptr) : item);
    if (out.size() > kMaxValueBytes) throw TemplateError("value too large (limit 64 MiB)");
  }
  return str_value(std::move(out));
}

Value f_items(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs(a, "items", {});
  return make_generator("do_items", v, {}, [v]() {
    std::vector<Value> pairs;
    if (v.is_undefined()) return pairs;
    if (!v.is_dict()) throw TemplateError("Can only get item pairs from a mapping.");
    for (const auto& [k, item] : v.as_dict().entries) pairs.push_back(Value::list({k, item}, true));
    return pairs;
  });
}

Value f_dictsort(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "dictsort", {"case_sensitive", "by", "reverse"});
  bool case_sensitive = truthy(args.get(0));
  std::string by = args.has(1) ? soft_str(args.get(1)) : "key";
  bool reverse = truthy(args.get(2));
  if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict()) throw TemplateError("'" + type_name(v) + "' object has no attribute 'items'");
  size_t pos = by == "key" ? 0 : 1;
  struct Entry {
    Value sort_key;
    Value pair;
  };
  std::vector<Entry> entries;
  for (const auto& [k, item] : v.as_dict().entries) {
    const Value& key = pos == 0 ? k : item;
    entries.push_back({case_sensitive ? key : ignore_case(key), Value::list({k, item}, true)});
  }
  std::stable_sort(entries.begin(), entries.end(), [reverse](const Entry& x, const Entry& y) {
    return reverse ? python_less(y.sort_key, x.sort_key) : python_less(x.sort_key, y.sort_key);
  });
  std::vector<Value> out;
  for (auto& e : entries) out.push_back(std::move(e.pair));
  return Value::list(std::move(out));
}

// Sort keys for sort/unique/min/max: attribute (comma-separated for several) and case folding.
Value sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  auto fold = [&](const Value& x) { return case_sensitive ? x : ignore_case(x); };
  if (attribute.is_none() || attribute.is_undefined()) return fold(item);
  if (attribute.is_string() && attribute.as_string().find(',') != std::string::npos) {
    std::vector<Value> keys;
    std::string path = attribute.as_string();
    size_t start = 0;
    while (true) {
      size_t comma = path.find(',', start);
      keys.push_back(fold(attribute_path(item, Value::string(path.substr(start, comma - start)), nullptr)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return Value::list(std::move(keys));
  }
  return fold(attribute_path(item, attribute, nullptr));
}

Value f_sort(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "sort", {"reverse", "case_sensitive", "attribute"});
  bool reverse = truthy(args.get(0));
  bool case_sensitive = truthy(args.get(1));
  Value attribute = args.get_or(2, Value::none());
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) keyed.emplace_back(sort_key(item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? python_less(y.first, x.first) : python_less(x.first, y.first);
  });
  std::vector<Value> out;
  for (auto& [k, item] : keyed) out.push_back(std::move(item));
  return Value::list(std::move(out));
}

Value f_unique(const Value& v, const CallArgs& a, Renderer&) {
  return make_generator("sync_do_unique", v, a, [v, a]() {
    BoundArgs args(a, "unique", {"case_sensitive", "attribute"});
    bool case_sensitive = truthy(args.get(0));
    Value attribute = args.get_or(1, Value::none());
    std::vector<Value> seen, out;
    std::unordered_multimap<size_t, size_t> seen_by_hash;  // hash -> index in seen
    for (const Value& item : iterate(v)) {
      Value key = sort_key(item, attribute, case_sensitive);
      require_hashable(key);
      size_t h = hash_value(key);
      bool duplicate = false;
      auto [first, last] = seen_by_hash.equal_range(h);
      for (auto it = first; it != last && !duplicate; ++it) duplicate = equals(seen[it->second], key);
      if (duplicate) continue;
      seen_by_hash.emplace(h, seen.size());
      seen.push_back(key);
      out.push_back(item);
    }
    return out;
  });
}

Value min_or_max(const Value& v, const CallArgs& a, bool want_max) {
  BoundArgs args(a, want_max ? "max" : "min", {"case_sensitive", "attribute"});
  bool case_sensitive = truthy(args.get(0));
  Value attribute = args.get_or(1, Value::none());
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value best_key = sort_key(items[0], attribute, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = sort_key(items[i], attribute, case_sensitive);
    if (want_max ? python_less(best_key, key) : python_less(key, best_key)) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}
Value f_min(const Value& v, const CallArgs& a, Renderer&) {
  return min_or_max(v, a, false);
}
Value f_max(const Value& v, const CallArgs& a, Renderer&) {
  return min_or_max(v, a, true);
}

Value f_sum(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "sum", {"attribute", "start"});
  Value total = args.get_or(1, Value::integer(0));
  for (const Value& item : iterate(v))
    total =
        binary_op(BinaryOp::kAdd, total, args.given(0) ? attribute_path(item, args.get(0), nullptr) : item);
  return total;
}

Value f_batch(const Value& v, const CallArgs& a, Renderer&) {
  return make_generator("do_batch", v, a, [v, a]() {
    BoundArgs args(a, "batch", {"linecount", "fill_with"}, 1);
    int64_t count = arg_int(args.get(0), "batch");
    if (count <= 0) throw TemplateError("batch size must be positive");
    std::vector<Value> rows, row;
    for (const Value& item : iterate(v)) {
      if (static_cast<int64_t>(row.size()) == count) {
        rows.push_back(Value::list(std::move(row)));
        row.clear();
      }
      row.push_back(item);
    }
    if (!row.empty()) {
      if (args.given(1))
        while (static_cast<int64_t>(row.size()) < count) row.push_back(args.get(1));
      rows.push_back(Value::list(std::move(row)));
    }
    return rows;
  });
}

Value f_default(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "default", {"default_value", "boolean"});
  Value fallback = args.get_or(0, Value::string(""));
  if (v.is_undefined() || (truthy(args.get(1)) && !truthy(v))) return fallback;
  return v;
}

Value f_attr(const Value& v, const CallArgs& a, Renderer&) {
  BoundArgs args(a, "attr", {"name"}, 1);
  std::string name = soft_str(args.get(0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_object()) return v.as_object().get_attribute(name);
  if (std::optional<Value> method = find_method(v, name)) return *method;
  return Value::undefined("'" + object_type_repr(v) + "' has no attribute '" + name + "'");
}

Value f_map(const Value& v, const CallArgs& a, Renderer& r) {
  return make_generator("sync_do_map", v, a, [v, a, &r]() {
    std::vector<Value> out;
    if (!truthy(v)) return out;
    const Value* attribute = nullptr;
    const Value* fallback = nullptr;
    if (a.positional.empty()) {
      for (const auto& [key, value] : a.keyword) {
        if (key == "attribute") {
          attribute = &value;
        } else if (key == "default") {
          fallback = &value;
        } else {
          throw TemplateError("Unexpected keyword argument '" + key + "'");
        }
      }
      if (!attribute) throw TemplateError("map requires a filter argument");
      if (fallback && fallback->is_none()) fallback = nullptr;
      for (const Value& item : iterate(v)) out.push_back(attribute_path(item, *attribute, fallback));
      return out;
    }
    CallArgs rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : iterate(v)) out.push_back(call_filter_by_name(a.positional[0], item, rest, r));
    return out;
  });
}

Value select_or_reject(const Value& v, const CallArgs& a, Renderer& r, bool select, bool lookup_attr) {
  return make_generator("select_or_reject", v, a, [v, a, &r, select, lookup_attr]() {
    std::vector<Value> out;
    if (!truthy(v)) return out;
    size_t offset = 0;
    const Value* attribute = nullptr;
    if (lookup_attr) {
      if (a.positional.empty()) throw TemplateError("Missing parameter for attribute name");
      attribute = &a.positional[0];
      offset = 1;
    }
    const Value* test_name = a.positional.size() > offset ? &a.positional[offset] : nullptr;
    CallArgs rest;
    if (test_name)
      rest.positional.assign(a.positional.begin() + static_cast<long>(offset) + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : iterate(v)) {
      Value subject = attribute ? attribute_path(item, *attribute, nullptr) : item;
      bool passed = test_name ? call_test_by_name(*test_name, subject, rest, r) : truthy(subject);
      if (passed == select) out.push_back(item);
    }
    return out;
  });
}
Value f_select(const Value& v, const CallArgs& a, Renderer& r) {
  return select_or_reject(v, a, r, true, false);
}
Value f_reject(const Value& v, const CallArgs& a, Renderer& r) {
  return select_or_reject(v, a, r, false, false);
}
Value f_selectattr(const Value& v, const CallArgs& a, Renderer& r) {
  return select_or_reject(v, a, r, true, true);
}
Value f_rejectattr(const Value& v, const CallArgs& a, Renderer& r) {
  return select_or_reject(v, a, r, false, true);
}

const FilterSpec kFilters[] = {
    {"abs", f_abs},           {"attr", f_attr},
    {"batch", f_batch},       {"capitalize", f_capitalize},
    {"center", f_center},     {"count", f_length},
    {"d", f_default},         {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape},
    {"escape", f_escape},     {"first", f_first},
    {"float", f_float},       {"forceescape", f_escape},
    {"format", f_format},     {"indent", f_indent},
    {"int", f_int},           {"items", f_items},
    {"join", f_join},         {"last", f_last},
    {"length", f_length},     {"list", f_list},
    {"lower", f_lower},       {"map", f_map},
    {"max", f_max},           {"min", f_min},
    {"reject", f_reject},     {"rejectattr", f_rejectattr},
    {"replace", f_replace},   {"reverse", f_reverse},
    {"round", f_round},       {"safe", f_safe},
    {"select", f_select},     {"selectattr", f_selectattr},
    {"sort", f_sort},         {"string", f_string},
    {"sum", f_sum},           {"title", f_title},
    {"tojson", f_tojson},     {"trim", f_trim},
    {"truncate", f_truncate}, {"unique", f_unique},
    {"upper", f_upper},       {"wordcount", f_wordcount},
};

}  // namespace

const FilterSpec* find_filter(std::string_view name) {
  for (const FilterSpec& spec : kFilters)
    if (name == spec.name) return &spec;
  return nullptr;
}

std::vector<std::string_view> filter_names() {
  std::vector<std::string_view> names;
  for (const FilterSpec& spec : kFilters) names.push_back(spec.name);
  return names;
}

}  // namespace lmx::jinja
