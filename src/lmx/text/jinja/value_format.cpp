// Python str() and repr() of interpreter values, byte-exact for data (None, bools, numbers, str, list, dict).
#include "lmx/text/jinja/value_format.h"

#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace lmx::jinja {
namespace {

// Values nest at most kMaxValueDepth deep; the margin covers objects (namespaces) that re-enter repr.
constexpr int kMaxReprDepth = static_cast<int>(kMaxValueDepth) + 100;

// Nesting of repr calls on this thread, across objects whose repr() re-enters to_repr (a namespace
// can contain itself).
thread_local int repr_depth = 0;

struct ReprDepthGuard {
  ReprDepthGuard() {
    if (++repr_depth > kMaxReprDepth) {
      --repr_depth;
      throw TemplateError("value nested too deeply to print");
    }
  }
  ~ReprDepthGuard() { --repr_depth; }
};

void append_repr(std::string& out, const Value& v);

void append_hex_escape(std::string& out, char32_t c) {
  char buf[16];
  if (c < 0x100) {
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
  } else if (c < 0x10000) {
    std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
  } else {
    std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
  }
  out += buf;
}

void append_string_repr(std::string& out, const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (char32_t c : unicode::decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (unicode::is_printable(c)) {
      unicode::append_utf8(out, c);
    } else {
      append_hex_escape(out, c);
    }
  }
  out.push_back(quote);
}

void append_repr(std::string& out, const Value& v) {
  ReprDepthGuard guard;
  switch (v.kind()) {
    case ValueKind::kUndefined:
      out += "Undefined";
      return;
    case ValueKind::kString:
      append_string_repr(out, v.as_string());
      return;
    case ValueKind::kList: {
      const ListData& list = v.as_list();
      if (list.view == DictView::kRange) {
        out += "range(" + std::to_string(list.range_start) + ", " + std::to_string(list.range_stop);
        if (list.range_step != 1) out += ", " + std::to_string(list.range_step);
        out += ")";
        return;
      }
      if (list.view != DictView::kNone) out += type_name(v) + "(";
      out.push_back(list.is_tuple ? '(' : '[');
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i) out += ", ";
        append_repr(out, list.items[i]);
      }
      if (list.is_tuple && list.items.size() == 1) out.push_back(',');
      out.push_back(list.is_tuple ? ')' : ']');
      if (list.view != DictView::kNone) out.push_back(')');
      return;
    }
    case ValueKind::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, item] : v.as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        append_repr(out, k);
        out += ": ";
        append_repr(out, item);
      }
      out.push_back('}');
      return;
    }
    case ValueKind::kObject:
      out += v.as_object().repr();
      return;
    default:
      out += to_str(v);
      return;
  }
}

}  // namespace

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, result.ptr);  // e.g. "-1.2345e+17", shortest round-trip digits
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e_pos = sci.find('e');
  int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string digits;
  for (size_t i = 0; i < e_pos; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;  // value = 0.DIGITS x 10^decpt
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out.append(digits, 0, static_cast<size_t>(decpt));
      out += '.';
      out.append(digits, static_cast<size_t>(decpt), std::string::npos);
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out.append(digits, 1, std::string::npos);
  }
  int e = decpt - 1;
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
  return out + exp_buf;
}

std::string string_repr(const std::string& s) {
  std::string out;
  append_string_repr(out, s);
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case ValueKind::kUndefined:
      return "";
    case ValueKind::kNone:
      return "None";
    case ValueKind::kBool:
      return v.as_bool() ? "True" : "False";
    case ValueKind::kInt:
      return std::to_string(v.as_int());
    case ValueKind::kFloat:
      return float_repr(v.as_double());
    case ValueKind::kString:
      return v.as_string();
    default:
      return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  std::string out;
  append_repr(out, v);
  return out;
}

}  // namespace lmx::jinja
