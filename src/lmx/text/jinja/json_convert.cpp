// Conversions between JSON and interpreter values, and Python's json.dumps as transformers' tojson uses it.
#include "lmx/text/jinja/json_convert.h"

#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/unicode.h"
#include "lmx/text/jinja/value_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace lmx::jinja {
namespace {

constexpr int kMaxJsonDepth = 512;

template <class Json>
Value convert(const Json& json, int depth) {
  if (depth > kMaxJsonDepth) throw TemplateError("JSON input nested more than 512 levels");
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = json.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(convert(item, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<Value, Value>> entries;
      entries.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it)
        entries.emplace_back(Value::string(it.key()), convert(it.value(), depth + 1));
      return Value::dict(std::move(entries));
    }
    default:
      throw TemplateError("unsupported JSON value (binary or discarded)");
  }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  auto escape_unit = [&](unsigned unit) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "\\u%04x", unit & 0xFFFFu);
    out += buf;
  };
  auto emit = [&](char32_t c) {
    switch (c) {
      case '"':
        out += "\\\"";
        return;
      case '\\':
        out += "\\\\";
        return;
      case '\n':
        out += "\\n";
        return;
      case '\r':
        out += "\\r";
        return;
      case '\t':
        out += "\\t";
        return;
      case '\b':
        out += "\\b";
        return;
      case '\f':
        out += "\\f";
        return;
      default:
        break;
    }
    if (c < 0x20) {
      escape_unit(static_cast<unsigned>(c));
    } else if (ensure_ascii && c > 0x7E) {
      if (c >= 0x10000) {
        char32_t v = c - 0x10000;
        escape_unit(0xD800 + static_cast<unsigned>(v >> 10));
        escape_unit(0xDC00 + static_cast<unsigned>(v & 0x3FF));
      } else {
        escape_unit(static_cast<unsigned>(c));
      }
    } else {
      unicode::append_utf8(out, c);
    }
  };
  if (unicode::is_ascii(s)) {
    for (char ch : s) emit(static_cast<unsigned char>(ch));
  } else {
    for (char32_t c : unicode::decode(s)) emit(c);
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {
    item_separator_ = options.item_separator.value_or(options.indent ? "," : ", ");
    key_separator_ = options.key_separator.value_or(": ");
  }

  void dump(const Value& v, int level) {
    if (level > static_cast<int>(kMaxValueDepth)) throw TemplateError("value nested too deeply for tojson");
    switch (v.kind()) {
      case ValueKind::kNone:
        out_ += "null";
        return;
      case ValueKind::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case ValueKind::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case ValueKind::kFloat:
        out_ += json_float(v.as_double());
        return;
      case ValueKind::kString:
        append_json_string(out_, v.as_string(), options_.ensure_ascii);
        return;
      case ValueKind::kList: {
        if (v.as_list().view != DictView::kNone)
          throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable");
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_.push_back('[');
        open(level + 1);
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) separate(level + 1);
          dump(items[i], level + 1);
        }
        close(level);
        out_.push_back(']');
        return;
      }
      case ValueKind::kDict: {
        std::vector<std::pair<std::string, const Value*>> entries;
        for (const auto& [k, item] : v.as_dict().entries) entries.emplace_back(key_string(k), &item);
        if (entries.empty()) {
          out_ += "{}";
          return;
        }
        if (options_.sort_keys) {
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        }
        out_.push_back('{');
        open(level + 1);
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) separate(level + 1);
          append_json_string(out_, entries[i].first, options_.ensure_ascii);
          out_ += key_separator_;
          dump(*entries[i].second, level + 1);
        }
        close(level);
        out_.push_back('}');
        return;
      }
      default:
        throw TemplateError("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  static std::string key_string(const Value& k) {
    switch (k.kind()) {
      case ValueKind::kString:
        return k.as_string();
      case ValueKind::kNone:
        return "null";
      case ValueKind::kBool:
        return k.as_bool() ? "true" : "false";
      case ValueKind::kInt:
        return std::to_string(k.as_int());
      case ValueKind::kFloat:
        return json_float(k.as_double());
      default:
        throw TemplateError("keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void newline_indent(int level) {
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }
  void open(int level) {
    if (options_.indent) newline_indent(level);
  }
  void separate(int level) {
    out_ += item_separator_;
    if (options_.indent) newline_indent(level);
  }
  void close(int level) {
    if (options_.indent) newline_indent(level);
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
  std::string out_;
};

}  // namespace

Value value_from_json(const nlohmann::json& json) {
  return convert(json, 0);
}
Value value_from_json(const nlohmann::ordered_json& json) {
  return convert(json, 0);
}

std::string python_json_dumps(const Value& v, const JsonDumpOptions& options) {
  Dumper dumper(options);
  dumper.dump(v, 0);
  return dumper.take();
}

}  // namespace lmx::jinja
