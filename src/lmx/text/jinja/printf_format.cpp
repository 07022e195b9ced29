// Python printf-style string formatting ("%s items" % n), used by the format filter.
#include "lmx/text/jinja/printf_format.h"

#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"

#include <cmath>
#include <cstdio>

namespace lmx::jinja {

std::string python_percent_format(const std::string& format, const Value& args) {
  std::vector<Value> positional;
  const DictData* mapping = nullptr;
  // Python treats any non-tuple argument with __getitem__ (dict, list, ...) as a mapping, which
  // also silences "not all arguments converted".
  bool mapping_like = !args.is_tuple() && (args.is_dict() || args.is_list());
  if (args.is_tuple()) {
    positional = args.as_list().items;
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.as_dict();
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) throw TemplateError("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) throw TemplateError("incomplete format key");
      if (!mapping) {
        if (args.is_list())
          throw TemplateError(type_name(args) + " indices must be integers or slices, not str");
        throw TemplateError("format requires a mapping");
      }
      std::string key = format.substr(i + 1, close - i - 1);
      value = mapping->find(std::string_view(key));
      if (!value) throw TemplateError("KeyError: '" + key + "'");
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string("-+ #0").find(format[i]) != std::string::npos)
      flags.push_back(format[i++]);
    std::string width, precision;
    while (i < format.size() && format[i] >= '0' && format[i] <= '9') width.push_back(format[i++]);
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = ".";
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') precision.push_back(format[i++]);
    }
    while (i < format.size() && (format[i] == 'l' || format[i] == 'h' || format[i] == 'L')) ++i;
    if (i >= format.size()) throw TemplateError("incomplete format");
    char conversion = format[i];
    if (conversion == '%') {
      out.push_back('%');
      continue;
    }
    if (!value) {
      if (next >= positional.size()) throw TemplateError("not enough arguments for format string");
      value = &positional[next++];
    }
    std::string spec = "%" + flags + width + precision;
    char buf[512];
    std::string text;
    switch (conversion) {
      case 's':
      case 'r':
      case 'a': {
        text = conversion == 's' ? to_str(*value) : to_repr(*value);
        if (precision.size() > 1) {
          std::u32string cps = unicode::decode(text);
          size_t p = static_cast<size_t>(std::stoul(precision.substr(1, 6)));
          if (cps.size() > p) text = unicode::encode(cps.substr(0, p));
        }
        size_t w = width.empty() ? 0 : static_cast<size_t>(std::stoul(width.substr(0, 6)));
        size_t len = unicode::length(text);
        if (len < w) {
          std::string padding(w - len, ' ');
          text = flags.find('-') != std::string::npos ? text + padding : padding + text;
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'o':
      case 'x':
      case 'X':
      case 'c': {
        if (!value->is_number()) {
          throw TemplateError(std::string("%") + conversion + " format: a real number is required, not " +
                              type_name(*value));
        }
        if (value->is_float() && !std::isfinite(value->as_double()))
          throw TemplateError("cannot convert float infinity or NaN to integer");
        long long n = value->is_float() ? static_cast<long long>(value->as_double()) : value->as_int();
        if (conversion == 'c') {
          unicode::append_utf8(text, static_cast<char32_t>(n));
          break;
        }
        char c = conversion == 'i' || conversion == 'u' ? 'd' : conversion;
        std::snprintf(buf, sizeof(buf), (spec + "ll" + c).c_str(), n);
        text = buf;
        if (flags.find('#') != std::string::npos && conversion == 'o') {
          size_t p = text.find_first_of("01234567");
          if (p != std::string::npos && text.compare(p, 1, "0") == 0) text.insert(p + 1, "o");
        }
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!value->is_number())
          throw TemplateError(std::string("must be real number, not ") + type_name(*value));
        std::snprintf(buf, sizeof(buf), (spec + conversion).c_str(), value->as_double());
        text = buf;
        break;
      }
      default:
        throw TemplateError(std::string("unsupported format character '") + conversion + "'");
    }
    out += text;
  }
  if (!used_mapping && next < positional.size() && !mapping_like)
    throw TemplateError("not all arguments converted during string formatting");
  return out;
}

}  // namespace lmx::jinja
