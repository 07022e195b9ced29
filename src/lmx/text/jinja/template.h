// lmx::jinja::Template: a Jinja2 template parsed once and rendered many times (the interpreter's entry
// point).
#pragma once

#include "lmx/text/jinja/ast.h"
#include "lmx/text/jinja/budget.h"
#include "lmx/text/jinja/lexer.h"
#include "lmx/text/jinja/value.h"

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lmx::jinja {

// A parsed template. Rendering is const and thread-safe: each render has its own state.
// Semantics follow Jinja2's ImmutableSandboxedEnvironment as transformers configures it (see
// docs/text.md "Chat templates" for the supported subset and the known differences).
class Template {
 public:
  // Parses `source`; throws TemplateError (with line, column and source line) on syntax errors.
  explicit Template(const std::string& source, const LexerOptions& options = {});
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // Renders with the given variables (shadowing the builtins range, namespace, dict, joiner,
  // raise_exception, strftime_now). Throws TemplateError naming the failing template line.
  std::string render(std::vector<std::pair<std::string, Value>> variables,
                     const RenderLimits& limits = {}) const;
  // Renders with the members of a JSON object as variables.
  std::string render_json(const nlohmann::ordered_json& variables, const RenderLimits& limits = {}) const;

  // The source after newline normalization, which error positions refer to.
  const std::string& normalized_source() const { return source_; }

 private:
  std::string source_;
  std::unique_ptr<Body> body_;
};

}  // namespace lmx::jinja
