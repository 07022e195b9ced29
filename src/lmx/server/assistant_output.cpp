// Splitting generated text into content, reasoning and tool calls (assistant_output.h).
#include "lmx/server/assistant_output.h"

#include "lmx/core/error.h"

#include <algorithm>
#include <cstdlib>
#include <random>

namespace lmx {
namespace {

struct Markers {
  std::string reasoning_begin, reasoning_end, call_begin, call_end;
};

Markers markers_of(OutputFormat format) {
  switch (format) {
    case OutputFormat::kGemma4:
      return {"<|channel>thought\n", "<channel|>", "<|tool_call>", "<tool_call|>"};
    case OutputFormat::kQwen3:
      return {"<think>", "</think>", "<tool_call>", "</tool_call>"};
    case OutputFormat::kLlama3:
    case OutputFormat::kPlain:
      break;
  }
  return {};
}

constexpr std::string_view kPythonTag = "<|python_tag|>";

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_suffix(const std::string& text, const std::string& marker) {
  if (marker.empty()) return 0;
  for (size_t len = std::min(marker.size() - 1, text.size()); len > 0; --len)
    if (text.compare(text.size() - len, len, marker, 0, len) == 0) return len;
  return 0;
}

std::string trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

// {"name": ..., "arguments" | "parameters": {...} or a string holding that object}.
bool json_call(const std::string& text, ToolCall& call) {
  const auto j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  nlohmann::ordered_json args =
      j.contains("arguments") ? j["arguments"] : j.value("parameters", nlohmann::ordered_json());
  if (args.is_string()) args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
  if (args.is_null()) args = nlohmann::ordered_json::object();
  if (!args.is_object()) return false;
  call.name = j["name"].get<std::string>();
  call.arguments = std::move(args);
  return !call.name.empty();
}

// A tool call's body between its markers (Gemma 4: call:NAME{...}; Qwen 3: JSON).
bool parse_call(OutputFormat format, const std::string& body, ToolCall& call) {
  if (format == OutputFormat::kGemma4) {
    const std::string b = trim(body);
    if (b.rfind("call:", 0) != 0) return false;
    const size_t brace = b.find('{');
    if (brace == std::string::npos) return false;
    call.name = trim(std::string_view(b).substr(5, brace - 5));
    try {
      call.arguments = parse_gemma4_arguments(b.substr(brace));
    } catch (const InvalidArgument&) {
      return false;
    }
    return !call.name.empty();
  }
  return json_call(trim(body), call);
}

// Gemma 4 argument syntax, recursive descent over `s`.
class Gemma4Arguments {
 public:
  explicit Gemma4Arguments(const std::string& s) : s_(s) {}
  nlohmann::ordered_json parse() {
    skip_space();
    if (peek() != '{') fail("an argument object must start with '{'");
    nlohmann::ordered_json v = value();
    skip_space();
    if (pos_ != s_.size()) fail("text after the argument object");
    return v;
  }

 private:
  static constexpr std::string_view kQuote = "<|\"|>";
  [[noreturn]] void fail(const std::string& what) const {
    throw InvalidArgument(fmt::format("tool-call arguments, at byte {}: {}", pos_, what));
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool at_quote() const { return s_.compare(pos_, kQuote.size(), kQuote) == 0; }
  std::string quoted() {
    pos_ += kQuote.size();
    const size_t end = s_.find(kQuote, pos_);
    if (end == std::string::npos) fail("an unterminated <|\"|> string");
    std::string out = s_.substr(pos_, end - pos_);
    pos_ = end + kQuote.size();
    return out;
  }
  nlohmann::ordered_json value() {
    skip_space();
    if (at_quote()) return quoted();
    if (peek() == '{') {
      ++pos_;
      nlohmann::ordered_json obj = nlohmann::ordered_json::object();
      skip_space();
      if (peek() == '}') return ++pos_, obj;
      for (;;) {
        skip_space();
        std::string key;
        if (at_quote()) {
          key = quoted();
        } else {
          const size_t colon = s_.find(':', pos_);
          if (colon == std::string::npos) fail("a key without ':'");
          key = trim(std::string_view(s_).substr(pos_, colon - pos_));
          pos_ = colon;
        }
        skip_space();
        if (peek() != ':') fail("expected ':' after key \"" + key + "\"");
        ++pos_;
        if (key.empty()) fail("an empty key");
        obj[key] = value();
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == '}') return ++pos_, obj;
        fail("expected ',' or '}' in an object");
      }
    }
    if (peek() == '[') {
      ++pos_;
      nlohmann::ordered_json arr = nlohmann::ordered_json::array();
      skip_space();
      if (peek() == ']') return ++pos_, arr;
      for (;;) {
        arr.push_back(value());
        skip_space();
        if (peek() == ',') {
          ++pos_;
          continue;
        }
        if (peek() == ']') return ++pos_, arr;
        fail("expected ',' or ']' in a list");
      }
    }
    // A bare number, boolean or null, up to the next delimiter.
    const size_t end = s_.find_first_of(",}]", pos_);
    if (end == std::string::npos) fail("a value without a closing delimiter");
    const std::string bare = trim(std::string_view(s_).substr(pos_, end - pos_));
    pos_ = end;
    if (bare == "true") return true;
    if (bare == "false") return false;
    if (bare == "null") return nullptr;
    const auto number = nlohmann::ordered_json::parse(bare, nullptr, false);
    if (bare.empty() || !number.is_number())
      fail("\"" + bare + "\" is not a string, number, boolean or null");
    return number;
  }

  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

OutputFormat output_format_of_template(const std::string& t) {
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|tool_call>") || has("<|channel>")) return OutputFormat::kGemma4;
  if (has("<tool_call>") || has("<think>")) return OutputFormat::kQwen3;
  if (has("<|python_tag|>") || has("ipython") || has("<|start_header_id|>")) return OutputFormat::kLlama3;
  return OutputFormat::kPlain;
}

const char* output_format_name(OutputFormat format) {
  switch (format) {
    case OutputFormat::kGemma4:
      return "gemma4";
    case OutputFormat::kQwen3:
      return "qwen3";
    case OutputFormat::kLlama3:
      return "llama3";
    case OutputFormat::kPlain:
      break;
  }
  return "plain";
}

nlohmann::ordered_json parse_gemma4_arguments(const std::string& text) {
  return Gemma4Arguments(text).parse();
}

ForcedToolCall forced_tool_call(OutputFormat format, const std::vector<std::string>& names) {
  LMX_REQUIRE(InvalidArgument, !names.empty(), "forcing a tool call needs at least one tool");
  ForcedToolCall f;
  for (const std::string& name : names) {
    const std::string quoted = nlohmann::json(name).dump();
    switch (format) {
      case OutputFormat::kGemma4:
        f.prefixes.push_back("<|tool_call>call:" + name);
        f.arguments = ForcedArguments::kGemma4;
        f.suffix = "<tool_call|>";
        break;
      case OutputFormat::kQwen3:
        f.prefixes.push_back("<tool_call>\n{\"name\": " + quoted + ", \"arguments\": ");
        f.arguments = ForcedArguments::kJson;
        f.suffix = "}\n</tool_call>";
        break;
      case OutputFormat::kLlama3:
        f.prefixes.push_back("{\"name\": " + quoted + ", \"parameters\": ");
        f.arguments = ForcedArguments::kJson;
        f.suffix = "}";
        break;
      case OutputFormat::kPlain:
        throw InvalidArgument(
            "this model's chat template has no tool-call syntax, so a tool call cannot be forced");
    }
  }
  return f;
}

std::string new_tool_call_id() {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", random(), static_cast<uint32_t>(random()));
}

OutputSplitter::OutputSplitter(OutputFormat format, bool parse_tools)
    : format_(format), parse_tools_(parse_tools) {}

std::vector<OutputPiece> OutputSplitter::feed(const std::string& text) {
  pending_ += text;
  std::vector<OutputPiece> out;
  run(false, out);
  return out;
}

std::vector<OutputPiece> OutputSplitter::finish() {
  std::vector<OutputPiece> out;
  run(true, out);
  return out;
}

void OutputSplitter::emit(OutputPiece::Kind kind, std::string text, std::vector<OutputPiece>& out) {
  if (trim_newlines_) {
    text.erase(0, text.find_first_not_of('\n'));
    if (text.empty()) return;
    trim_newlines_ = false;
  }
  if (text.empty()) return;
  if (!out.empty() && out.back().kind == kind && kind != OutputPiece::kToolCall) {
    out.back().text += text;
  } else {
    out.push_back({kind, std::move(text), {}});
  }
}

void OutputSplitter::run(bool final, std::vector<OutputPiece>& out) {
  const Markers m = markers_of(format_);
  const std::string call_begin = parse_tools_ ? m.call_begin : std::string();
  for (;;) {
    switch (state_) {
      case State::kStart: {
        if (format_ != OutputFormat::kLlama3 || !parse_tools_) {
          state_ = State::kContent;
          break;
        }
        const std::string t = trim(pending_);
        if (t.empty() && !final) return;
        if (t.rfind(kPythonTag, 0) == 0 || (!t.empty() && t[0] == '{')) {
          state_ = State::kWholeCall;
        } else if (!final && kPythonTag.substr(0, std::min(t.size(), kPythonTag.size())) == t) {
          return;
        } else {
          state_ = State::kContent;
        }
        break;
      }
      case State::kContent: {
        size_t at = std::string::npos;
        const std::string* marker = nullptr;
        for (const std::string* mk : {&m.reasoning_begin, &call_begin}) {
          if (mk->empty()) continue;
          const size_t i = pending_.find(*mk);
          if (i < at) at = i, marker = mk;
        }
        if (marker) {
          emit(OutputPiece::kContent, pending_.substr(0, at), out);
          pending_.erase(0, at + marker->size());
          state_ = marker == &call_begin ? State::kToolCall : State::kReasoning;
          // Qwen 3 opens its reasoning with "<think>\n".
          trim_newlines_ = state_ == State::kReasoning && format_ == OutputFormat::kQwen3;
          break;
        }
        const size_t hold = final ? 0
                                  : std::max(partial_suffix(pending_, m.reasoning_begin),
                                             partial_suffix(pending_, call_begin));
        emit(OutputPiece::kContent, pending_.substr(0, pending_.size() - hold), out);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      case State::kReasoning: {
        const size_t at = pending_.find(m.reasoning_end);
        if (at != std::string::npos) {
          emit(OutputPiece::kReasoning, pending_.substr(0, at), out);
          pending_.erase(0, at + m.reasoning_end.size());
          // Qwen 3 puts "\n\n" between its reasoning and the answer.
          trim_newlines_ = format_ == OutputFormat::kQwen3;
          state_ = State::kContent;
          break;
        }
        const size_t hold = final ? 0 : partial_suffix(pending_, m.reasoning_end);
        emit(OutputPiece::kReasoning, pending_.substr(0, pending_.size() - hold), out);
        pending_.erase(0, pending_.size() - hold);
        return;
      }
      case State::kToolCall: {
        const size_t at = pending_.find(m.call_end);
        if (at == std::string::npos && !final) return;
        const std::string body = pending_.substr(0, std::min(at, pending_.size()));
        ToolCall call;
        if (parse_call(format_, body, call)) {
          out.push_back({OutputPiece::kToolCall, {}, std::move(call)});
        } else {
          emit(OutputPiece::kContent, m.call_begin + body + (at == std::string::npos ? "" : m.call_end), out);
        }
        pending_.erase(0, at == std::string::npos ? pending_.size() : at + m.call_end.size());
        state_ = State::kContent;
        if (at == std::string::npos) return;
        break;
      }
      case State::kWholeCall: {
        if (!final) return;
        std::string body = trim(pending_);
        if (body.rfind(kPythonTag, 0) == 0) body = trim(std::string_view(body).substr(kPythonTag.size()));
        ToolCall call;
        if (json_call(body, call)) {
          out.push_back({OutputPiece::kToolCall, {}, std::move(call)});
        } else {
          emit(OutputPiece::kContent, pending_, out);
        }
        pending_.clear();
        return;
      }
    }
  }
}

AssistantOutput split_output(OutputFormat format, bool parse_tools, const std::string& text) {
  OutputSplitter splitter(format, parse_tools);
  std::vector<OutputPiece> pieces = splitter.feed(text);
  for (OutputPiece& p : splitter.finish()) pieces.push_back(std::move(p));
  AssistantOutput out;
  for (OutputPiece& p : pieces) {
    if (p.kind == OutputPiece::kContent) out.content += p.text;
    if (p.kind == OutputPiece::kReasoning) out.reasoning += p.text;
    if (p.kind == OutputPiece::kToolCall) out.tool_calls.push_back(std::move(p.call));
  }
  return out;
}

}  // namespace lmx
