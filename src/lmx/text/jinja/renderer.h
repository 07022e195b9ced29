// Evaluator: executes a parsed template against variables with Jinja2's scoping, within RenderLimits.
#pragma once

#include "lmx/text/jinja/ast.h"
#include "lmx/text/jinja/budget.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lmx::jinja {

// One variable scope. Lookups walk to the parent; assignments stay in the frame, so `set` in a
// for-loop body does not leak out (each iteration gets a fresh frame), while `set` in an `if`
// does (if bodies share their frame), as in Jinja2.
struct Frame {
  explicit Frame(std::shared_ptr<Frame> parent_frame) : parent(std::move(parent_frame)) {}
  const Value* find(const std::string& name) const;  // this frame or its ancestors
  void set(const std::string& name, Value value);

  std::shared_ptr<Frame> parent;
  std::vector<std::pair<std::string, Value>> vars;
};

class Renderer {
 public:
  Renderer(const std::string& normalized_source, const RenderLimits& limits);
  ~Renderer();

  // Renders `body` with `variables` as the template context (after the builtins, which they
  // may shadow). Throws TemplateError naming the template line of the failing expression.
  std::string render(const Body& body, std::vector<std::pair<std::string, Value>> variables);

  // Calls a macro (or caller) defined by `stmt` whose closure is `closure`; returns its output.
  Value call_macro(const Stmt& stmt, const std::shared_ptr<Frame>& closure, const CallArgs& args,
                   const Value* caller);
  // Registers a namespace so its attributes are released after the render (they can form cycles).
  void track_object(std::shared_ptr<Object> object);

  const RenderLimits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  Flow exec_for(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out);
  Value eval(const Expr& expr, const std::shared_ptr<Frame>& frame);
  Value eval_inner(const Expr& expr, const std::shared_ptr<Frame>& frame);
  Value eval_filter(const Expr& expr, const std::shared_ptr<Frame>& frame, const Value* block_input);
  Value eval_call(const Expr& expr, const std::shared_ptr<Frame>& frame, const Value* caller);
  bool eval_compare(const Expr& expr, const std::shared_ptr<Frame>& frame);
  CallArgs eval_args(const Expr& expr, size_t first, const std::shared_ptr<Frame>& frame);
  Value lookup(const std::string& name, const std::shared_ptr<Frame>& frame) const;
  void assign(const Target& target, const Value& value, const std::shared_ptr<Frame>& frame);
  Value make_macro(const Stmt& stmt, const std::shared_ptr<Frame>& frame);
  void append_output(std::string& out, const std::string& text);
  [[noreturn]] void rethrow_at(const TemplateError& error, int line, int column) const;

  // Counts nesting on `counter`; throws TemplateError(what) past `limit`.
  struct DepthGuard {
    DepthGuard(int* counter, int limit, const char* what);
    ~DepthGuard() { --*counter; }
    int* counter;
  };

  const std::string& source_;
  RenderLimits limits_;
  std::vector<std::pair<std::string, Value>> builtins_;
  int eval_depth_ = 0;
  int macro_depth_ = 0;
  std::vector<std::shared_ptr<Object>> tracked_;
};

}  // namespace lmx::jinja
