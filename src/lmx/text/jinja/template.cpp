// lmx::jinja::Template: a Jinja2 template parsed once and rendered many times (the interpreter's entry
// point).
#include "lmx/text/jinja/template.h"

#include "lmx/text/jinja/json_convert.h"
#include "lmx/text/jinja/parser.h"
#include "lmx/text/jinja/renderer.h"
#include "lmx/text/jinja/template_error.h"

#include <nlohmann/json.hpp>

namespace lmx::jinja {

Template::Template(const std::string& source, const LexerOptions& options)
    : source_(normalize_template_source(source, options)) {
  std::vector<Token> tokens = tokenize(source_, options);
  body_ = std::make_unique<Body>(parse_template(tokens, source_));
}

Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(std::vector<std::pair<std::string, Value>> variables,
                             const RenderLimits& limits) const {
  Renderer renderer(source_, limits);
  return renderer.render(*body_, std::move(variables));
}

std::string Template::render_json(const nlohmann::ordered_json& variables, const RenderLimits& limits) const {
  if (!variables.is_object()) throw TemplateError("template variables must be a JSON object");
  std::vector<std::pair<std::string, Value>> vars;
  for (auto it = variables.begin(); it != variables.end(); ++it)
    vars.emplace_back(it.key(), value_from_json(it.value()));
  return render(std::move(vars), limits);
}

}  // namespace lmx::jinja
