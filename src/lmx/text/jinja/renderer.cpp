// Evaluator: executes a parsed template against variables with Jinja2's scoping, within RenderLimits.
#include "lmx/text/jinja/renderer.h"

#include "lmx/text/jinja/builtins.h"
#include "lmx/text/jinja/filters.h"
#include "lmx/text/jinja/lexer.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/test_functions.h"
#include "lmx/text/jinja/value_format.h"
#include "lmx/text/jinja/value_ops.h"

#include <algorithm>
#include <new>

namespace lmx::jinja {
namespace {

// A macro, or the `caller` of a call block, bound to the frame it was defined in.
class MacroObject : public Object {
 public:
  MacroObject(const Stmt& stmt, std::shared_ptr<Frame> closure) : stmt_(stmt), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  std::string repr() const override {
    return "<Macro '" + (stmt_.kind == StmtKind::kMacro ? stmt_.name : std::string("caller")) + "'>";
  }
  bool is_callable() const override { return true; }
  Value call(const CallArgs& args, Renderer& renderer) override {
    if (!closure_) throw TemplateError("macro called after its template finished rendering");
    return renderer.call_macro(stmt_, closure_, args, nullptr);
  }
  Value get_attribute(const std::string& name) const override {
    if (name == "name") return Value::string(stmt_.kind == StmtKind::kMacro ? stmt_.name : "caller");
    if (name == "arguments") {
      std::vector<Value> names;
      for (const auto& p : stmt_.params) names.push_back(Value::string(p));
      return Value::list(std::move(names), true);
    }
    if (name == "catch_kwargs") return Value::boolean(stmt_.uses_kwargs);
    if (name == "catch_varargs") return Value::boolean(stmt_.uses_varargs);
    if (name == "caller") return Value::boolean(stmt_.uses_caller);
    return Object::get_attribute(name);
  }
  void release() { closure_.reset(); }

 private:
  const Stmt& stmt_;
  std::shared_ptr<Frame> closure_;
};

// Jinja's LoopContext for one iteration of a for loop.
class LoopObject : public Object {
 public:
  // `depth` is the deepest nesting among `items` plus one.
  LoopObject(std::shared_ptr<const std::vector<Value>> items, size_t index, uint32_t depth)
      : items_(std::move(items)), index_(index), depth_(depth) {}
  uint32_t nesting_depth() const override { return depth_; }
  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override {
    return "<LoopContext " + std::to_string(index_ + 1) + "/" + std::to_string(items_->size()) + ">";
  }
  Value get_attribute(const std::string& name) const override {
    const int64_t index0 = static_cast<int64_t>(index_);
    const int64_t length = static_cast<int64_t>(items_->size());
    if (name == "index0") return Value::integer(index0);
    if (name == "index") return Value::integer(index0 + 1);
    if (name == "revindex0") return Value::integer(length - index0 - 1);
    if (name == "revindex") return Value::integer(length - index0);
    if (name == "first") return Value::boolean(index0 == 0);
    if (name == "last") return Value::boolean(index0 == length - 1);
    if (name == "length") return Value::integer(length);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem") {
      if (index_ == 0) return Value::undefined("there is no previous item");
      return (*items_)[index_ - 1];
    }
    if (name == "nextitem") {
      if (index_ + 1 >= items_->size()) return Value::undefined("there is no next item");
      return (*items_)[index_ + 1];
    }
    if (name == "cycle") {
      size_t index = index_;
      return Value::function("cycle", [index](const CallArgs& args, Renderer&) {
        if (args.positional.empty()) throw TemplateError("no items for cycling given");
        return args.positional[index % args.positional.size()];
      });
    }
    if (name == "changed") {
      auto state = changed_state_;
      return Value::function("changed", [state](const CallArgs& args, Renderer&) {
        Value current = Value::list(args.positional, true);
        if (state->has_value && equals(state->last, current)) return Value::boolean(false);
        state->has_value = true;
        state->last = current;
        return Value::boolean(true);
      });
    }
    return Object::get_attribute(name);
  }

  struct ChangedState {
    bool has_value = false;
    Value last;
  };
  std::shared_ptr<ChangedState> changed_state_ = std::make_shared<ChangedState>();

 private:
  std::shared_ptr<const std::vector<Value>> items_;
  size_t index_;
  uint32_t depth_;
};

}  // namespace

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get())
    for (const auto& [key, value] : f->vars)
      if (key == name) return &value;
  return nullptr;
}

void Frame::set(const std::string& name, Value value) {
  for (auto& [key, existing] : vars) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Renderer::DepthGuard::DepthGuard(int* c, int limit, const char* what) : counter(c) {
  if (++*counter > limit) {
    --*counter;
    throw TemplateError(std::string(what));
  }
}

Renderer::Renderer(const std::string& normalized_source, const RenderLimits& limits)
    : source_(normalized_source), limits_(limits), builtins_(make_builtins()) {}

Renderer::~Renderer() {
  // Macros hold their defining frame and namespaces may hold anything: break the cycles.
  for (auto& object : tracked_) {
    if (auto* macro = dynamic_cast<MacroObject*>(object.get())) macro->release();
    if (auto* ns = dynamic_cast<NamespaceObject*>(object.get())) ns->clear();
  }
}

void Renderer::track_object(std::shared_ptr<Object> object) {
  tracked_.push_back(std::move(object));
}

void Renderer::rethrow_at(const TemplateError& error, int line, int column) const {
  throw TemplateError(error.reason(), line, column, source_line(source_, line));
}

std::string Renderer::render(const Body& body, std::vector<std::pair<std::string, Value>> variables) {
  BudgetScope budget(limits_);
  auto root = std::make_shared<Frame>(nullptr);
  root->vars = std::move(variables);
  std::string out;
  try {
    exec_body(body, root, out);
  } catch (const TemplateError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw TemplateError("out of memory while rendering the template");
  } catch (const std::length_error&) {
    throw TemplateError("value too large while rendering the template");
  }
  return out;
}

void Renderer::append_output(std::string& out, const std::string& text) {
  if (text.size() > limits_.max_output_bytes || out.size() + text.size() > limits_.max_output_bytes)
    throw TemplateError("template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  charge_bytes(text.size());
  out += text;
}

Value Renderer::lookup(const std::string& name, const std::shared_ptr<Frame>& frame) const {
  if (const Value* v = frame->find(name)) return *v;
  for (const auto& [key, value] : builtins_)
    if (key == name) return value;
  return Value::undefined("'" + name + "' is undefined");
}

void Renderer::assign(const Target& target, const Value& value, const std::shared_ptr<Frame>& frame) {
  switch (target.kind) {
    case Target::Kind::kName:
      frame->set(target.name, value);
      return;
    case Target::Kind::kNamespaceAttribute: {
      Value ns = lookup(target.name, frame);
      auto* object = ns.is_object() ? dynamic_cast<NamespaceObject*>(&ns.as_object()) : nullptr;
      if (!object) throw TemplateError("cannot assign attribute on non-namespace object");
      object->set(target.attribute, value);
      return;
    }
    case Target::Kind::kTuple: {
      std::vector<Value> items = iterate(value);
      if (items.size() > target.items.size())
        throw TemplateError("too many values to unpack (expected " + std::to_string(target.items.size()) +
                            ")");
      if (items.size() < target.items.size())
        throw TemplateError("not enough values to unpack (expected " + std::to_string(target.items.size()) +
                            ", got " + std::to_string(items.size()) + ")");
      for (size_t i = 0; i < items.size(); ++i) assign(target.items[i], items[i], frame);
      return;
    }
  }
}

Value Renderer::make_macro(const Stmt& stmt, const std::shared_ptr<Frame>& frame) {
  auto macro = std::make_shared<MacroObject>(stmt, frame);
  tracked_.push_back(macro);
  return Value::object(macro);
}

Value Renderer::call_macro(const Stmt& stmt, const std::shared_ptr<Frame>& closure, const CallArgs& args,
                           const Value* caller) {
  DepthGuard guard(&macro_depth_, limits_.max_macro_depth, "macro calls nested too deeply");
  const std::string macro_name = stmt.kind == StmtKind::kMacro ? stmt.name : "caller";
  auto frame = std::make_shared<Frame>(closure);
  const size_t n = stmt.params.size();
  std::vector<bool> filled(n, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      frame->set(stmt.params[i], args.positional[i]);
      filled[i] = true;
    } else if (stmt.uses_varargs) {
      varargs.push_back(args.positional[i]);
    } else {
      throw TemplateError("macro '" + macro_name + "' takes not more than " + std::to_string(n) +
                          " argument(s)");
    }
  }
  std::vector<std::pair<Value, Value>> kwargs;
  Value caller_value = caller ? *caller : Value::undefined("No caller defined");
  for (const auto& [key, value] : args.keyword) {
    size_t index = n;
    for (size_t i = 0; i < n; ++i)
      if (stmt.params[i] == key) index = i;
    if (index < n) {
      if (filled[index])
        throw TemplateError("macro '" + macro_name + "' got multiple values for argument '" + key + "'");
      frame->set(key, value);
      filled[index] = true;
    } else if (key == "caller" && stmt.uses_caller) {
      caller_value = value;
    } else if (stmt.uses_kwargs) {
      kwargs.emplace_back(Value::string(key), value);
    } else {
      throw TemplateError("macro '" + macro_name + "' takes no keyword argument '" + key + "'");
    }
  }
  const size_t first_default = n - stmt.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (filled[i]) continue;
    if (i >= first_default) {
      frame->set(stmt.params[i], eval(*stmt.defaults[i - first_default], frame));
    } else {
      frame->set(stmt.params[i], Value::undefined("parameter '" + stmt.params[i] + "' was not provided"));
    }
  }
  if (stmt.uses_varargs) frame->set("varargs", Value::list(std::move(varargs), true));
  if (stmt.uses_kwargs) frame->set("kwargs", Value::dict(std::move(kwargs)));
  if (stmt.uses_caller) frame->set("caller", caller_value);
  std::string out;
  exec_body(stmt.body, frame, out);
  return Value::string(std::move(out));
}

Renderer::Flow Renderer::exec_body(const Body& body, const std::shared_ptr<Frame>& frame, std::string& out) {
  for (const auto& stmt : body) {
    Flow flow = exec(*stmt, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out) {
  DepthGuard guard(&eval_depth_, limits_.max_eval_depth, "template evaluation nested too deeply");
  try {
    switch (stmt.kind) {
      case StmtKind::kData:
        append_output(out, stmt.text);
        return Flow::kNormal;
      case StmtKind::kOutput:
        append_output(out, to_str(eval(*stmt.expr, frame)));
        return Flow::kNormal;
      case StmtKind::kIf:
        for (const auto& [test, body] : stmt.branches)
          if (truthy(eval(*test, frame))) return exec_body(body, frame, out);
        return exec_body(stmt.else_body, frame, out);
      case StmtKind::kFor:
        return exec_for(stmt, frame, out);
      case StmtKind::kSet:
        assign(stmt.target, eval(*stmt.expr, frame), frame);
        return Flow::kNormal;
      case StmtKind::kSetBlock: {
        std::string text;
        exec_body(stmt.body, std::make_shared<Frame>(frame), text);
        Value value = Value::string(std::move(text));
        if (stmt.filter) value = eval_filter(*stmt.filter, frame, &value);
        assign(stmt.target, value, frame);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        frame->set(stmt.name, make_macro(stmt, frame));
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        Value caller = make_macro(stmt, frame);
        append_output(out, to_str(eval_call(*stmt.expr, frame, &caller)));
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        std::string text;
        exec_body(stmt.body, std::make_shared<Frame>(frame), text);
        Value input = Value::string(std::move(text));
        append_output(out, to_str(eval_filter(*stmt.filter, frame, &input)));
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Frame>(frame);
        for (const auto& [target, value] : stmt.assignments) assign(target, eval(*value, frame), inner);
        return exec_body(stmt.body, inner, out);
      }
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
      case StmtKind::kScope:
        exec_body(stmt.body, std::make_shared<Frame>(frame), out);
        return Flow::kNormal;
    }
  } catch (const TemplateError& e) {
    if (e.line() == 0) rethrow_at(e, stmt.line, stmt.column);
    throw;
  }
  return Flow::kNormal;
}

Renderer::Flow Renderer::exec_for(const Stmt& stmt, const std::shared_ptr<Frame>& frame, std::string& out) {
  std::vector<Value> all = iterate(eval(*stmt.expr, frame));
  auto items = std::make_shared<std::vector<Value>>();
  if (stmt.condition) {
    for (const Value& item : all) {
      charge_iterations(1);
      auto scratch = std::make_shared<Frame>(frame);
      assign(stmt.target, item, scratch);
      if (truthy(eval(*stmt.condition, scratch))) items->push_back(item);
    }
  } else {
    *items = std::move(all);
  }
  if (items->empty()) {
    exec_body(stmt.else_body, std::make_shared<Frame>(frame), out);
    return Flow::kNormal;
  }
  std::shared_ptr<const std::vector<Value>> shared_items = items;
  std::shared_ptr<LoopObject::ChangedState> changed_state;
  std::shared_ptr<Frame> body_frame;
  uint32_t loop_depth = 0;
  if (stmt.uses_loop) {
    for (const Value& item : *shared_items) loop_depth = std::max(loop_depth, value_depth(item));
    check_value_depth(++loop_depth);
  }
  for (size_t i = 0; i < shared_items->size(); ++i) {
    charge_iterations(1);
    // Each iteration starts from a fresh scope; the frame is reused unless something (a macro
    // defined in the body) still holds it.
    if (body_frame && body_frame.use_count() == 1) {
      body_frame->vars.clear();
    } else {
      body_frame = std::make_shared<Frame>(frame);
    }
    assign(stmt.target, (*shared_items)[i], body_frame);
    if (stmt.uses_loop) {
      auto loop = std::make_shared<LoopObject>(shared_items, i, loop_depth);
      if (changed_state) loop->changed_state_ = changed_state;
      changed_state = loop->changed_state_;
      body_frame->set("loop", Value::object(loop));
    }
    if (exec_body(stmt.body, body_frame, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

Value Renderer::eval(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  DepthGuard guard(&eval_depth_, limits_.max_eval_depth, "template evaluation nested too deeply");
  try {
    return eval_inner(expr, frame);
  } catch (const TemplateError& e) {
    if (e.line() == 0) rethrow_at(e, expr.line, expr.column);
    throw;
  }
}

CallArgs Renderer::eval_args(const Expr& expr, size_t first, const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  for (size_t i = first; i < expr.children.size(); ++i)
    args.positional.push_back(eval(*expr.children[i], frame));
  for (const auto& [key, value] : expr.kwargs) args.keyword.emplace_back(key, eval(*value, frame));
  return args;
}

Value Renderer::eval_filter(const Expr& expr, const std::shared_ptr<Frame>& frame, const Value* block_input) {
  Value input;
  if (expr.children[0]) {
    const Expr& inner = *expr.children[0];
    input = inner.kind == ExprKind::kFilter && block_input ? eval_filter(inner, frame, block_input)
                                                           : eval(inner, frame);
  } else if (block_input) {
    input = *block_input;
  }
  CallArgs args = eval_args(expr, 1, frame);
  try {
    return expr.filter->function(input, args, *this);
  } catch (const TemplateError& e) {
    if (e.line() == 0) rethrow_at(e, expr.line, expr.column);
    throw;
  }
}

Value Renderer::eval_call(const Expr& expr, const std::shared_ptr<Frame>& frame, const Value* caller) {
  Value callee = eval(*expr.children[0], frame);
  CallArgs args = eval_args(expr, 1, frame);
  if (caller) args.keyword.emplace_back("caller", *caller);
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_object() || !callee.as_object().is_callable())
    throw TemplateError("'" + type_name(callee) + "' object is not callable");
  return callee.as_object().call(args, *this);
}

bool Renderer::eval_compare(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  Value left = eval(*expr.children[0], frame);
  for (size_t i = 0; i < expr.compare_ops.size(); ++i) {
    Value right = eval(*expr.children[i + 1], frame);
    bool result = false;
    switch (expr.compare_ops[i]) {
      case CompareOp::kEq:
        result = equals(left, right);
        break;
      case CompareOp::kNe:
        result = !equals(left, right);
        break;
      case CompareOp::kLt:
        result = less_than(left, right);
        break;
      case CompareOp::kGt:
        result = less_than(right, left);
        break;
      case CompareOp::kLe:
      case CompareOp::kGe: {
        const Value& a = expr.compare_ops[i] == CompareOp::kLe ? left : right;
        const Value& b = expr.compare_ops[i] == CompareOp::kLe ? right : left;
        if (a.is_number() && b.is_number()) {
          result = (a.is_float() || b.is_float()) ? a.as_double() <= b.as_double() : a.as_int() <= b.as_int();
        } else {
          result = !less_than(b, a);
        }
        break;
      }
      case CompareOp::kIn:
        result = contains(right, left);
        break;
      case CompareOp::kNotIn:
        result = !contains(right, left);
        break;
    }
    if (!result) return false;
    left = std::move(right);
  }
  return true;
}

Value Renderer::eval_inner(const Expr& expr, const std::shared_ptr<Frame>& frame) {
  switch (expr.kind) {
    case ExprKind::kLiteral:
      return expr.literal;
    case ExprKind::kName:
      return lookup(expr.name, frame);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(expr.children.size());
      for (const auto& child : expr.children) items.push_back(eval(*child, frame));
      return Value::list(std::move(items), expr.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      std::vector<std::pair<Value, Value>> entries;
      for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
        Value key = eval(*expr.children[i], frame);
        Value value = eval(*expr.children[i + 1], frame);
        require_hashable(key);
        bool replaced = false;
        for (auto& entry : entries) {
          if (equals(entry.first, key)) {
            entry.second = value;
            replaced = true;
            break;
          }
        }
        if (!replaced) entries.emplace_back(std::move(key), std::move(value));
      }
      return Value::dict(std::move(entries));
    }
    case ExprKind::kGetAttr:
      return get_attribute(eval(*expr.children[0], frame), expr.name);
    case ExprKind::kGetItem: {
      Value object = eval(*expr.children[0], frame);
      return get_item(object, eval(*expr.children[1], frame));
    }
    case ExprKind::kSlice: {
      Value object = eval(*expr.children[0], frame);
      Value bounds[3];
      const Value* ptrs[3] = {nullptr, nullptr, nullptr};
      for (int i = 0; i < 3; ++i) {
        if (expr.children[static_cast<size_t>(i) + 1]) {
          bounds[i] = eval(*expr.children[static_cast<size_t>(i) + 1], frame);
          ptrs[i] = &bounds[i];
        }
      }
      return get_slice(object, ptrs[0], ptrs[1], ptrs[2]);
    }
    case ExprKind::kCall:
      return eval_call(expr, frame, nullptr);
    case ExprKind::kFilter:
      return eval_filter(expr, frame, nullptr);
    case ExprKind::kTest: {
      Value input = eval(*expr.children[0], frame);
      CallArgs args = eval_args(expr, 1, frame);
      return Value::boolean(expr.test->function(input, args, *this));
    }
    case ExprKind::kNot:
      return Value::boolean(!truthy(eval(*expr.children[0], frame)));
    case ExprKind::kNeg:
      return negate(eval(*expr.children[0], frame));
    case ExprKind::kPos:
      return unary_plus(eval(*expr.children[0], frame));
    case ExprKind::kBinary: {
      Value left = eval(*expr.children[0], frame);
      Value right = eval(*expr.children[1], frame);
      return binary_op(expr.binary_op, left, right);
    }
    case ExprKind::kConcat: {
      std::vector<Value> parts;
      parts.reserve(expr.children.size());
      size_t total = 0;
      for (const auto& child : expr.children) {
        Value part = eval(*child, frame);
        if (!part.is_string()) part = Value::string(to_str(part));
        total += part.as_string().size();
        parts.push_back(std::move(part));
      }
      reserve_value_bytes(total);
      std::string out;
      out.reserve(total);
      for (const Value& part : parts) out += part.as_string();
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare:
      return Value::boolean(eval_compare(expr, frame));
    case ExprKind::kAnd: {
      Value left = eval(*expr.children[0], frame);
      return truthy(left) ? eval(*expr.children[1], frame) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*expr.children[0], frame);
      return truthy(left) ? left : eval(*expr.children[1], frame);
    }
    case ExprKind::kCondExpr:
      if (truthy(eval(*expr.children[0], frame))) return eval(*expr.children[1], frame);
      if (expr.children[2]) return eval(*expr.children[2], frame);
      return Value::undefined("the inline if-expression on line " + std::to_string(expr.line) +
                              " evaluated to false and no else section was defined.");
  }
  return Value();
}

}  // namespace lmx::jinja
