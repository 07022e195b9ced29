// Python methods of str, dict and list that Jinja's immutable sandbox lets templates call.
#include "lmx/text/jinja/methods.h"

#include "lmx/text/jinja/call_args.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"
#include "lmx/text/jinja/value_ops.h"

#include <algorithm>
#include <set>

namespace lmx::jinja {
namespace {

using Fn = std::function<Value(const CallArgs&, Renderer&)>;

Value unsafe(const std::string& name, const char* type) {
  return Value::undefined("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
}

// Code-point view of a string for index-based operations.
struct CodePoints {
  explicit CodePoints(const std::string& s) : cps(unicode::decode(s)) {}
  std::u32string cps;
};

// Python's optional [start[, end]] window of a str method, as a code-point substring.
std::string window(const std::string& s, const BoundArgs& args, size_t start_index, const char* fn) {
  if (!args.given(start_index) && !args.given(start_index + 1)) return s;
  Value start = args.get_or(start_index, Value::none());
  Value end = args.get_or(start_index + 1, Value::none());
  if (!start.is_none()) arg_int(start, fn);
  if (!end.is_none()) arg_int(end, fn);
  Value sliced = get_slice(Value::string(s), &start, &end, nullptr);
  return sliced.as_string();
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, const char* fn) {
  auto test = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_string()) return test(affix.as_string());
  if (affix.is_tuple()) {
    for (const Value& item : affix.as_list().items) {
      if (!item.is_string())
        throw TemplateError(std::string("tuple for ") + fn + " must only contain str, not " +
                            type_name(item));
      if (test(item.as_string())) return true;
    }
    return false;
  }
  throw TemplateError(std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(affix));
}

int64_t code_point_index(const std::string& haystack, size_t byte_pos) {
  return static_cast<int64_t>(unicode::length(std::string_view(haystack).substr(0, byte_pos)));
}

template <class Pred>
Value all_chars(const std::string& s, Pred pred) {
  if (s.empty()) return Value::boolean(false);
  for (char32_t c : unicode::decode(s))
    if (!pred(c)) return Value::boolean(false);
  return Value::boolean(true);
}

Value pad(const std::string& s, const BoundArgs& args, char mode, const char* fn) {
  int64_t width = arg_int(args.get(0), fn);
  std::string fill = " ";
  if (args.has(1)) {
    fill = arg_string(args.get(1), fn);
    if (unicode::length(fill) != 1)
      throw TemplateError("The fill character must be exactly one character long");
  }
  int64_t len = static_cast<int64_t>(unicode::length(s));
  if (width <= len) return Value::string(s);
  if (width > static_cast<int64_t>(kMaxValueBytes)) throw TemplateError("value too large (limit 64 MiB)");
  int64_t total = width - len;
  int64_t left = mode == 'l' ? 0 : mode == 'r' ? total : total / 2 + (total & width & 1);
  int64_t right = total - left;
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < right; ++i) out += fill;
  return Value::string(std::move(out));
}

Value string_method(const Value& receiver, const std::string& name) {
  const std::string s = receiver.as_string();
  auto bind = [&](Fn fn) { return Value::function(name, std::move(fn)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"chars"});
      const std::string* chars = args.given(0) ? &arg_string(args.get(0), name) : nullptr;
      return Value::string(unicode::strip(s, chars, name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"sep", "maxsplit"});
      const std::string* sep = args.given(0) ? &arg_string(args.get(0), name) : nullptr;
      int64_t maxsplit = args.has(1) ? arg_int(args.get(1), name) : -1;
      std::vector<Value> parts;
      for (auto& part : python_split(s, sep, maxsplit, name == "rsplit"))
        parts.push_back(Value::string(std::move(part)));
      return Value::list(std::move(parts));
    });
  }
  if (name == "splitlines") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"keepends"});
      bool keepends = truthy(args.get(0));
      std::u32string cps = unicode::decode(s);
      std::vector<Value> lines;
      size_t start = 0;
      for (size_t i = 0; i < cps.size(); ++i) {
        char32_t c = cps[i];
        bool is_break = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                        c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!is_break) continue;
        size_t end = i;
        if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
        lines.push_back(Value::string(unicode::encode(cps.substr(start, (keepends ? i + 1 : end) - start))));
        start = i + 1;
      }
      if (start < cps.size()) lines.push_back(Value::string(unicode::encode(cps.substr(start))));
      return Value::list(std::move(lines));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"prefix", "start", "end"}, 1);
      return Value::boolean(
          affix_match(window(s, args, 1, name.c_str()), args.get(0), name == "startswith", name.c_str()));
    });
  }
  if (name == "lower" || name == "upper" || name == "title" || name == "capitalize" || name == "casefold" ||
      name == "swapcase") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {});
      if (name == "lower" || name == "casefold") return Value::string(unicode::lower(s));
      if (name == "upper") return Value::string(unicode::upper(s));
      if (name == "title") return Value::string(python_title(s));
      if (name == "capitalize") return Value::string(python_capitalize(s));
      std::u32string cps = unicode::decode(s);
      for (char32_t& c : cps) c = unicode::is_upper(c) ? unicode::to_lower(c) : unicode::to_upper(c);
      return Value::string(unicode::encode(cps));
    });
  }
  if (name == "replace") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"old", "new", "count"}, 2);
      int64_t count = args.has(2) ? arg_int(args.get(2), name) : -1;
      return Value::string(
          python_replace(s, arg_string(args.get(0), name), arg_string(args.get(1), name), count));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"sub", "start", "end"}, 1);
      const std::string& sub = arg_string(args.get(0), name);
      int64_t offset = 0;
      if (args.given(1)) {
        int64_t start = arg_int(args.get(1), name);
        int64_t len = static_cast<int64_t>(unicode::length(s));
        offset = start < 0 ? std::max<int64_t>(0, start + len) : std::min(start, len);
      }
      std::string hay = window(s, args, 1, name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(unicode::length(hay)) + 1);
        int64_t n = 0;
        for (size_t p = hay.find(sub); p != std::string::npos; p = hay.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      size_t pos = name[0] == 'r' ? hay.rfind(sub) : hay.find(sub);
      if (pos == std::string::npos) {
        if (name == "index" || name == "rindex") throw TemplateError("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(offset + code_point_index(hay, pos));
    });
  }
  if (name == "join") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"iterable"}, 1);
      std::string out;
      size_t i = 0;
      for (const Value& item : iterate(args.get(0))) {
        if (!item.is_string())
          throw TemplateError("sequence item " + std::to_string(i) + ": expected str instance, " +
                              type_name(item) + " found");
        if (i++) out += s;
        out += item.as_string();
        if (out.size() > kMaxValueBytes) throw TemplateError("value too large (limit 64 MiB)");
      }
      reserve_value_bytes(out.size());
      return Value::string(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" ||
      name == "isdecimal" || name == "isnumeric" || name == "islower" || name == "isupper") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {});
      if (name == "isdigit" || name == "isnumeric") return all_chars(s, unicode::is_digit);
      if (name == "isdecimal") return all_chars(s, unicode::is_decimal);
      if (name == "isalpha") return all_chars(s, unicode::is_alpha);
      if (name == "isalnum") return all_chars(s, unicode::is_alnum);
      if (name == "isspace") return all_chars(s, unicode::is_space);
      bool want_lower = name == "islower";
      bool any_cased = false;
      for (char32_t c : unicode::decode(s)) {
        if (unicode::is_upper(c) && unicode::to_lower(c) != c) {
          if (want_lower) return Value::boolean(false);
          any_cased = true;
        } else if (unicode::is_lower(c) && unicode::to_upper(c) != c) {
          if (!want_lower) return Value::boolean(false);
          any_cased = true;
        }
      }
      return Value::boolean(any_cased);
    });
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"width", "fillchar"}, 1);
      return pad(s, args, name == "center" ? 'c' : name == "ljust" ? 'l' : 'r', name.c_str());
    });
  }
  if (name == "zfill") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"width"}, 1);
      int64_t width = arg_int(args.get(0), name);
      int64_t len = static_cast<int64_t>(unicode::length(s));
      if (width <= len) return Value::string(s);
      if (width > static_cast<int64_t>(kMaxValueBytes)) throw TemplateError("value too large (limit 64 MiB)");
      std::string zeros(static_cast<size_t>(width - len), '0');
      if (!s.empty() && (s[0] == '+' || s[0] == '-'))
        return Value::string(s.substr(0, 1) + zeros + s.substr(1));
      return Value::string(zeros + s);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"affix"}, 1);
      const std::string& affix = arg_string(args.get(0), name);
      if (name == "removeprefix")
        return Value::string(s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s);
      if (affix.size() <= s.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
        return Value::string(s.substr(0, s.size() - affix.size()));
      return Value::string(s);
    });
  }
  if (name == "partition" || name == "rpartition") {
    return bind([s, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"sep"}, 1);
      const std::string& sep = arg_string(args.get(0), name);
      if (sep.empty()) throw TemplateError("empty separator");
      size_t pos = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (pos == std::string::npos) {
        if (name == "partition")
          return Value::list({Value::string(s), Value::string(""), Value::string("")}, true);
        return Value::list({Value::string(""), Value::string(""), Value::string(s)}, true);
      }
      return Value::list(
          {Value::string(s.substr(0, pos)), Value::string(sep), Value::string(s.substr(pos + sep.size()))},
          true);
    });
  }
  if (name == "format") {
    return bind([s](const CallArgs& a, Renderer&) { return Value::string(python_str_format(s, a)); });
  }
  return Value();  // sentinel: no such method
}

Value dict_method(const Value& receiver, const std::string& name) {
  if (name == "clear" || name == "pop" || name == "popitem" || name == "setdefault" || name == "update")
    return unsafe(name, "dict");
  auto bind = [&](Fn fn) { return Value::function(name, std::move(fn), receiver); };
  if (name == "get") {
    return bind([receiver, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"key", "default"}, 1);
      require_hashable(args.get(0));
      if (const Value* v = receiver.as_dict().find(args.get(0))) return *v;
      return args.get_or(1, Value::none());
    });
  }
  if (name == "items" || name == "keys" || name == "values" || name == "copy") {
    return bind([receiver, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {});
      if (name == "copy") return receiver;
      std::vector<Value> out;
      for (const auto& [k, v] : receiver.as_dict().entries) {
        if (name == "items") {
          out.push_back(Value::list({k, v}, true));
        } else {
          out.push_back(name == "keys" ? k : v);
        }
      }
      DictView view = name == "items"  ? DictView::kItems
                      : name == "keys" ? DictView::kKeys
                                       : DictView::kValues;
      return Value::dict_view(std::move(out), view);
    });
  }
  return Value();
}

Value list_method(const Value& receiver, const std::string& name) {
  if (receiver.is_plain_list() && !receiver.is_tuple() &&
      (name == "append" || name == "clear" || name == "pop" || name == "reverse" || name == "insert" ||
       name == "sort" || name == "extend" || name == "remove"))
    return unsafe(name, "list");
  auto bind = [&](Fn fn) { return Value::function(name, std::move(fn), receiver); };
  if (name == "index" || name == "count") {
    return bind([receiver, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {"value"}, 1);
      const auto& items = receiver.as_list().items;
      int64_t count = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!equals(items[i], args.get(0))) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") throw TemplateError(to_repr(args.get(0)) + " is not in list");
      return Value::integer(count);
    });
  }
  if (name == "copy" && receiver.is_plain_list() && !receiver.is_tuple()) {
    return bind([receiver, name](const CallArgs& a, Renderer&) {
      BoundArgs args(a, name, {});
      return receiver;
    });
  }
  return Value();
}

}  // namespace

std::optional<Value> find_method(const Value& receiver, const std::string& name) {
  if (name.empty() || name[0] == '_') return std::nullopt;
  Value method;
  if (receiver.is_string()) {
    method = string_method(receiver, name);
  } else if (receiver.is_dict()) {
    method = dict_method(receiver, name);
  } else if (receiver.is_sequence_list()) {
    method = list_method(receiver, name);
  }
  if (method.is_undefined() && method.undefined_hint().empty()) return std::nullopt;
  return method;
}

std::vector<std::string> python_split(const std::string& s, const std::string* sep, int64_t maxsplit,
                                      bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) throw TemplateError("empty separator");
    if (!from_right) {
      size_t start = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t pos = s.find(*sep, start);
        if (pos == std::string::npos) break;
        parts.push_back(s.substr(start, pos - start));
        start = pos + sep->size();
      }
      parts.push_back(s.substr(start));
    } else {
      size_t end = s.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < sep->size()) break;
        size_t pos = s.rfind(*sep, end - sep->size());
        if (pos == std::string::npos) break;
        parts.push_back(s.substr(pos + sep->size(), end - pos - sep->size()));
        end = pos;
      }
      parts.push_back(s.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  std::u32string cps = unicode::decode(s);
  const size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && unicode::is_space(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(unicode::encode(cps.substr(i)));  // the remainder keeps its trailing spaces
        break;
      }
      size_t j = i;
      while (j < n && !unicode::is_space(cps[j])) ++j;
      parts.push_back(unicode::encode(cps.substr(i, j - i)));
      i = j;
    }
  } else {
    size_t i = n;
    while (true) {
      while (i > 0 && unicode::is_space(cps[i - 1])) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(unicode::encode(cps.substr(0, i)));  // the remainder keeps its leading spaces
        break;
      }
      size_t j = i;
      while (j > 0 && !unicode::is_space(cps[j - 1])) --j;
      parts.push_back(unicode::encode(cps.substr(j, i - j)));
      i = j;
    }
    std::reverse(parts.begin(), parts.end());
  }
  return parts;
}

std::string python_replace(const std::string& s, const std::string& old, const std::string& replacement,
                           int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string cps = unicode::decode(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      if (i < cps.size()) unicode::append_utf8(out, cps[i]);
      if (out.size() > kMaxValueBytes) throw TemplateError("value too large (limit 64 MiB)");
    }
    reserve_value_bytes(out.size());
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t pos = s.find(old, start);
    if (pos == std::string::npos) break;
    out.append(s, start, pos - start);
    out += replacement;
    if (out.size() > kMaxValueBytes) throw TemplateError("value too large (limit 64 MiB)");
    start = pos + old.size();
    ++done;
  }
  out.append(s, start, std::string::npos);
  reserve_value_bytes(out.size());
  return out;
}

std::string python_title(const std::string& s) {
  std::u32string cps = unicode::decode(s);
  bool previous_cased = false;
  for (char32_t& c : cps) {
    if (previous_cased) {
      c = unicode::to_lower(c);
    } else {
      c = unicode::to_title(c);
    }
    previous_cased = unicode::is_cased(c);
  }
  return unicode::encode(cps);
}

std::string python_capitalize(const std::string& s) {
  std::u32string cps = unicode::decode(s);
  for (size_t i = 0; i < cps.size(); ++i)
    cps[i] = i == 0 ? unicode::to_title(cps[i]) : unicode::to_lower(cps[i]);
  return unicode::encode(cps);
}

std::string python_str_format(const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      throw TemplateError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = format.find('}', i);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) throw TemplateError("format spec in str.format is not supported");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    if (field.find(':') != std::string::npos)
      throw TemplateError("format spec in str.format is not supported");
    const Value* value = nullptr;
    if (field.empty()) {
      if (auto_index >= args.positional.size())
        throw TemplateError("Replacement index " + std::to_string(auto_index) +
                            " out of range for positional args tuple");
      value = &args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t index = std::stoul(field.substr(0, 9));
      if (index >= args.positional.size())
        throw TemplateError("Replacement index " + field + " out of range for positional args tuple");
      value = &args.positional[index];
    } else {
      for (const auto& [key, v] : args.keyword)
        if (key == field) value = &v;
      if (!value) throw TemplateError("KeyError: '" + field + "'");
    }
    out += conversion == 'r' ? to_repr(*value) : to_str(*value);
  }
  return out;
}

}  // namespace lmx::jinja
