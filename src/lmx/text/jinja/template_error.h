// TemplateError: every failure to parse or render a Jinja template, with the template position.
#pragma once

#include "lmx/core/error.h"

#include <string>

namespace lmx {

// A template could not be parsed or rendered. `reason()` is the bare message (for
// raise_exception(msg) it is exactly msg, as transformers reports it); `what()` adds the
// position ("line L, column C") and, for parse errors, the offending source line with a caret.
// line()/column() are 1-based; 0 means unknown.
class TemplateError : public Error {
 public:
  explicit TemplateError(const std::string& reason, int line = 0, int column = 0,
                         const std::string& snippet = {})
      : Error(format_message(reason, line, column, snippet)), reason_(reason), line_(line), column_(column) {}

  const std::string& reason() const { return reason_; }
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  static std::string format_message(const std::string& reason, int line, int column,
                                    const std::string& snippet) {
    if (line <= 0) return "template error: " + reason;
    std::string message = "template error at line " + std::to_string(line);
    if (column > 0) message += ", column " + std::to_string(column);
    message += ": " + reason;
    if (!snippet.empty()) {
      message += "\n  " + snippet;
      if (column > 0) message += "\n  " + std::string(static_cast<size_t>(column - 1), ' ') + "^";
    }
    return message;
  }

  std::string reason_;
  int line_;
  int column_;
};

}  // namespace lmx
