// Jinja parser: turns lexer tokens into a statement tree, following Jinja2's grammar and precedence.
#include "lmx/text/jinja/parser.h"

#include "lmx/text/jinja/filters.h"
#include "lmx/text/jinja/template_error.h"
#include "lmx/text/jinja/test_functions.h"

#include <algorithm>
#include <initializer_list>

namespace lmx::jinja {
namespace {

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData:
      return "template data / text";
    case TokenType::kVariableBegin:
      return "begin of print statement";
    case TokenType::kVariableEnd:
      return "end of print statement";
    case TokenType::kBlockBegin:
      return "begin of statement block";
    case TokenType::kBlockEnd:
      return "end of statement block";
    case TokenType::kEof:
      return "end of template";
    default:
      return token.value;
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& source) : tokens_(tokens), source_(source) {}

  Body parse() {
    Body body = subparse({});
    return body;
  }

 private:
  // ---- token stream -------------------------------------------------------------------------
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  static bool is_name(const Token& t, const char* name) {
    return t.type == TokenType::kName && t.value == name;
  }
  static bool is_op(const Token& t, const char* op) {
    return t.type == TokenType::kOperator && t.value == op;
  }
  bool skip_name(const char* name) {
    if (!is_name(current(), name)) return false;
    advance();
    return true;
  }
  bool skip_op(const char* op) {
    if (!is_op(current(), op)) return false;
    advance();
    return true;
  }

  [[noreturn]] void fail(const std::string& reason, const Token& at) const {
    throw TemplateError(reason, at.line, at.column, source_line(source_, at.line));
  }
  [[noreturn]] void fail(const std::string& reason) const { fail(reason, current()); }

  const Token& expect(TokenType type, const char* what) {
    if (current().type != type) {
      if (current().type == TokenType::kEof)
        fail(std::string("unexpected end of template, expected '") + what + "'.");
      fail(std::string("expected token '") + what + "', got '" + describe(current()) + "'");
    }
    return advance();
  }
  const Token& expect_op(const char* op) {
    if (!is_op(current(), op)) {
      if (current().type == TokenType::kEof)
        fail(std::string("unexpected end of template, expected '") + op + "'.");
      fail(std::string("expected token '") + op + "', got '" + describe(current()) + "'");
    }
    return advance();
  }
  const Token& expect_name(const char* name) {
    if (!is_name(current(), name)) {
      if (current().type == TokenType::kEof)
        fail(std::string("unexpected end of template, expected '") + name + "'.");
      fail(std::string("expected token '") + name + "', got '" + describe(current()) + "'");
    }
    return advance();
  }
  const Token& expect_block_end() { return expect(TokenType::kBlockEnd, "end of statement block"); }

  // Jinja's messages for a missing end tag or an unknown tag.
  [[noreturn]] void fail_unknown(const std::string* tag_name, const Token& at) const {
    std::string message =
        tag_name ? "Encountered unknown tag '" + *tag_name + "'." : "Unexpected end of template.";
    if (!end_token_stack_.empty()) {
      const auto& looking = end_token_stack_.back();
      std::string names;
      for (size_t i = 0; i < looking.size(); ++i) names += (i ? " or '" : "'") + looking[i] + "'";
      bool expected_somewhere = false;
      if (tag_name)
        for (const auto& level : end_token_stack_)
          if (std::find(level.begin(), level.end(), *tag_name) != level.end()) expected_somewhere = true;
      if (expected_somewhere) {
        message +=
            " You probably made a nesting mistake. Jinja is expecting this tag, but currently looking for " +
            names + ".";
      } else {
        message += " Jinja was looking for the following tags: " + names + ".";
      }
    }
    if (!tag_stack_.empty())
      message += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
    fail(message, at);
  }
  [[noreturn]] void fail_eof() const { fail_unknown(nullptr, current()); }

  struct DepthGuard {
    explicit DepthGuard(Parser* p) : parser(p) {
      if (++parser->depth_ > kMaxParseDepth) parser->fail("template nested too deeply (limit 200)");
    }
    ~DepthGuard() { --parser->depth_; }
    Parser* parser;
  };

  // ---- statements ---------------------------------------------------------------------------
  Body subparse(const std::vector<std::string>& end_tokens) {
    DepthGuard guard(this);
    Body body;
    if (!end_tokens.empty()) end_token_stack_.push_back(end_tokens);
    while (current().type != TokenType::kEof) {
      const Token& token = current();
      if (token.type == TokenType::kData) {
        auto stmt = make_stmt(StmtKind::kData, token);
        stmt->text = token.value;
        body.push_back(std::move(stmt));
        advance();
      } else if (token.type == TokenType::kVariableBegin) {
        advance();
        auto stmt = make_stmt(StmtKind::kOutput, current());
        stmt->expr = parse_tuple(false, true, {}, false);
        expect(TokenType::kVariableEnd, "end of print statement");
        body.push_back(std::move(stmt));
      } else if (token.type == TokenType::kBlockBegin) {
        advance();
        if (!end_tokens.empty() && current().type == TokenType::kName &&
            std::find(end_tokens.begin(), end_tokens.end(), current().value) != end_tokens.end()) {
          end_token_stack_.pop_back();
          return body;
        }
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail("internal parsing error");
      }
    }
    if (!end_tokens.empty()) fail_eof();
    return body;
  }

  // Parses `[:] %} body {% end...` up to one of end_tokens; the end tag name stays current.
  Body parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_tokens);
    if (current().type == TokenType::kEof) fail_eof();
    if (drop_needle) advance();
    return body;
  }

  StmtPtr make_stmt(StmtKind kind, const Token& at) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->line = at.line;
    stmt->column = at.column;
    return stmt;
  }

  StmtPtr parse_statement() {
    const Token& token = current();
    if (token.type != TokenType::kName) fail("tag name expected");
    const std::string name = token.value;
    static const char* const kUnsupported[] = {"extends", "include", "import", "from", "block", "autoescape"};
    for (const char* tag : kUnsupported)
      if (name == tag) fail("the '" + name + "' tag is not supported by lmx's Jinja interpreter");
    tag_stack_.push_back(name);
    StmtPtr stmt;
    if (name == "for") {
      stmt = parse_for();
    } else if (name == "if") {
      stmt = parse_if();
    } else if (name == "set") {
      stmt = parse_set();
    } else if (name == "macro") {
      stmt = parse_macro();
    } else if (name == "call") {
      stmt = parse_call_block();
    } else if (name == "filter") {
      stmt = parse_filter_block();
    } else if (name == "with") {
      stmt = parse_with();
    } else if (name == "print") {
      stmt = parse_print();
    } else if (name == "generation") {
      stmt = make_stmt(StmtKind::kScope, advance());
      stmt->body = parse_statements({"endgeneration"}, true);
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail("'" + name + "' outside of a loop");
      stmt = make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, advance());
    } else {
      tag_stack_.pop_back();
      fail_unknown(&name, token);
    }
    tag_stack_.pop_back();
    return stmt;
  }

  StmtPtr parse_for() {
    auto stmt = make_stmt(StmtKind::kFor, advance());
    stmt->target = parse_assign_target(true, false, {"in"}, false);
    expect_name("in");
    stmt->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) stmt->condition = parse_expression(true);
    if (is_name(current(), "recursive"))
      fail("recursive for loops are not supported by lmx's Jinja interpreter");
    ++loop_depth_;
    stmt->body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    stmt->uses_loop = false;
    find_special_names(stmt->body, stmt.get());  // sets uses_loop when the body names `loop`
    stmt->uses_caller = stmt->uses_varargs = stmt->uses_kwargs = false;
    if (advance().value == "else") stmt->else_body = parse_statements({"endfor"}, true);
    return stmt;
  }

  StmtPtr parse_if() {
    auto stmt = make_stmt(StmtKind::kIf, advance());
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      Body body = parse_statements({"elif", "else", "endif"}, false);
      stmt->branches.emplace_back(std::move(test), std::move(body));
      const Token& token = advance();
      if (token.value == "elif") continue;
      if (token.value == "else") stmt->else_body = parse_statements({"endif"}, true);
      break;
    }
    return stmt;
  }

  StmtPtr parse_set() {
    const Token& at = advance();
    Target target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto stmt = make_stmt(StmtKind::kSet, at);
      stmt->target = std::move(target);
      stmt->expr = parse_tuple(false, true, {}, false);
      return stmt;
    }
    auto stmt = make_stmt(StmtKind::kSetBlock, at);
    stmt->target = std::move(target);
    if (is_op(current(), "|")) stmt->filter = parse_filter(nullptr, false);
    stmt->body = parse_statements({"endset"}, true);
    return stmt;
  }

  void parse_signature(Stmt* stmt) {
    expect_op("(");
    while (!is_op(current(), ")")) {
      if (!stmt->params.empty()) expect_op(",");
      Target arg = parse_assign_target(false, true, {}, false);
      if (skip_op("=")) {
        stmt->defaults.push_back(parse_expression(true));
      } else if (!stmt->defaults.empty()) {
        fail("non-default argument follows default argument");
      }
      stmt->params.push_back(arg.name);
    }
    expect_op(")");
  }

  static void find_special_names(const Expr* e, Stmt* macro) {
    if (!e) return;
    if (e->kind == ExprKind::kName) {
      if (e->name == "caller") macro->uses_caller = true;
      if (e->name == "varargs") macro->uses_varargs = true;
      if (e->name == "kwargs") macro->uses_kwargs = true;
      if (e->name == "loop") macro->uses_loop = true;
    }
    for (const auto& child : e->children) find_special_names(child.get(), macro);
    for (const auto& [key, child] : e->kwargs) find_special_names(child.get(), macro);
  }

  static void find_special_names(const Body& body, Stmt* macro) {
    for (const auto& s : body) {
      find_special_names(s->expr.get(), macro);
      find_special_names(s->condition.get(), macro);
      find_special_names(s->filter.get(), macro);
      for (const auto& [test, branch] : s->branches) {
        find_special_names(test.get(), macro);
        find_special_names(branch, macro);
      }
      for (const auto& d : s->defaults) find_special_names(d.get(), macro);
      for (const auto& [t, e] : s->assignments) find_special_names(e.get(), macro);
      find_special_names(s->body, macro);
      find_special_names(s->else_body, macro);
    }
  }

  StmtPtr parse_macro() {
    auto stmt = make_stmt(StmtKind::kMacro, advance());
    stmt->name = parse_assign_target(false, true, {}, false).name;
    parse_signature(stmt.get());
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved_loop_depth;
    find_special_names(stmt->body, stmt.get());
    return stmt;
  }

  StmtPtr parse_call_block() {
    auto stmt = make_stmt(StmtKind::kCallBlock, advance());
    if (is_op(current(), "(")) parse_signature(stmt.get());
    const Token& at = current();
    stmt->expr = parse_expression(true);
    if (stmt->expr->kind != ExprKind::kCall) fail("expected call", at);
    int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    stmt->body = parse_statements({"endcall"}, true);
    loop_depth_ = saved_loop_depth;
    find_special_names(stmt->body, stmt.get());
    return stmt;
  }

  StmtPtr parse_filter_block() {
    auto stmt = make_stmt(StmtKind::kFilterBlock, advance());
    stmt->filter = parse_filter(nullptr, true);
    stmt->body = parse_statements({"endfilter"}, true);
    return stmt;
  }

  StmtPtr parse_with() {
    auto stmt = make_stmt(StmtKind::kWith, advance());
    while (current().type != TokenType::kBlockEnd) {
      if (!stmt->assignments.empty()) expect_op(",");
      Target target = parse_assign_target(true, false, {}, false);
      expect_op("=");
      stmt->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    stmt->body = parse_statements({"endwith"}, true);
    return stmt;
  }

  StmtPtr parse_print() {
    auto stmt = make_stmt(StmtKind::kScope, advance());
    while (current().type != TokenType::kBlockEnd) {
      if (!stmt->body.empty()) expect_op(",");
      auto output = make_stmt(StmtKind::kOutput, current());
      output->expr = parse_expression(true);
      stmt->body.push_back(std::move(output));
    }
    return stmt;
  }

  // ---- assignment targets -------------------------------------------------------------------
  Target to_target(const Expr& e, const Token& at) {
    Target target;
    if (e.kind == ExprKind::kName) {
      if (e.name == "true" || e.name == "false" || e.name == "none" || e.name == "True" ||
          e.name == "False" || e.name == "None")
        fail("can't assign to 'name'", at);
      target.kind = Target::Kind::kName;
      target.name = e.name;
    } else if (e.kind == ExprKind::kTuple) {
      target.kind = Target::Kind::kTuple;
      for (const auto& item : e.children) target.items.push_back(to_target(*item, at));
    } else if (e.kind == ExprKind::kGetAttr && e.namespace_ref) {
      target.kind = Target::Kind::kNamespaceAttribute;
      target.name = e.children[0]->name;
      target.attribute = e.name;
    } else {
      const char* what = e.kind == ExprKind::kLiteral   ? "const"
                         : e.kind == ExprKind::kGetAttr ? "getattr"
                                                        : "expression";
      fail(std::string("can't assign to '") + what + "'", at);
    }
    return target;
  }

  Target parse_assign_target(bool with_tuple, bool name_only, const std::vector<std::string>& extra_end,
                             bool with_namespace) {
    const Token& at = current();
    if (name_only) {
      const Token& token = expect(TokenType::kName, "name");
      Expr e;
      e.kind = ExprKind::kName;
      e.name = token.value;
      return to_target(e, token);
    }
    ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace)
                           : parse_primary(with_namespace);
    return to_target(*e, at);
  }

  // ---- expressions --------------------------------------------------------------------------
  ExprPtr make_expr(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    Token at = current();
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      auto node = make_expr(ExprKind::kCondExpr, at);
      node->children.push_back(std::move(expr2));
      node->children.push_back(std::move(expr1));
      node->children.push_back(std::move(expr3));
      expr1 = std::move(node);
      at = current();
    }
    return expr1;
  }

  ExprPtr parse_or() {
    Token at = current();
    ExprPtr left = parse_and();
    while (skip_name("or")) {
      auto node = make_expr(ExprKind::kOr, at);
      node->children.push_back(std::move(left));
      node->children.push_back(parse_and());
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_and() {
    Token at = current();
    ExprPtr left = parse_not();
    while (skip_name("and")) {
      auto node = make_expr(ExprKind::kAnd, at);
      node->children.push_back(std::move(left));
      node->children.push_back(parse_not());
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name(current(), "not")) {
      DepthGuard guard(this);
      auto node = make_expr(ExprKind::kNot, advance());
      node->children.push_back(parse_not());
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    Token at = current();
    ExprPtr expr = parse_math1();
    std::vector<CompareOp> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      const Token& t = current();
      CompareOp op;
      if (is_op(t, "==")) {
        op = CompareOp::kEq;
      } else if (is_op(t, "!=")) {
        op = CompareOp::kNe;
      } else if (is_op(t, "<")) {
        op = CompareOp::kLt;
      } else if (is_op(t, "<=")) {
        op = CompareOp::kLe;
      } else if (is_op(t, ">")) {
        op = CompareOp::kGt;
      } else if (is_op(t, ">=")) {
        op = CompareOp::kGe;
      } else if (is_name(t, "in")) {
        op = CompareOp::kIn;
      } else if (is_name(t, "not") && is_name(peek(), "in")) {
        advance();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      advance();
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto node = make_expr(ExprKind::kCompare, at);
    node->children.push_back(std::move(expr));
    for (auto& operand : operands) node->children.push_back(std::move(operand));
    node->compare_ops = std::move(ops);
    return node;
  }

  ExprPtr binary(BinaryOp op, ExprPtr left, ExprPtr right, const Token& at) {
    auto node = make_expr(ExprKind::kBinary, at);
    node->binary_op = op;
    node->children.push_back(std::move(left));
    node->children.push_back(std::move(right));
    return node;
  }

  ExprPtr parse_math1() {
    Token at = current();
    ExprPtr left = parse_concat();
    while (is_op(current(), "+") || is_op(current(), "-")) {
      BinaryOp op = advance().value == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = binary(op, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    Token at = current();
    ExprPtr first = parse_math2();
    if (!is_op(current(), "~")) return first;
    auto node = make_expr(ExprKind::kConcat, at);
    node->children.push_back(std::move(first));
    while (skip_op("~")) node->children.push_back(parse_math2());
    return node;
  }

  ExprPtr parse_math2() {
    Token at = current();
    ExprPtr left = parse_pow();
    while (true) {
      BinaryOp op;
      if (is_op(current(), "*")) {
        op = BinaryOp::kMul;
      } else if (is_op(current(), "/")) {
        op = BinaryOp::kDiv;
      } else if (is_op(current(), "//")) {
        op = BinaryOp::kFloorDiv;
      } else if (is_op(current(), "%")) {
        op = BinaryOp::kMod;
      } else {
        break;
      }
      advance();
      left = binary(op, std::move(left), parse_pow(), at);
    }
    return left;
  }

  ExprPtr parse_pow() {
    Token at = current();
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = binary(BinaryOp::kPow, std::move(left), parse_unary(true), at);
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(this);
    const Token& at = current();
    ExprPtr node;
    if (is_op(at, "-") || is_op(at, "+")) {
      node = make_expr(at.value == "-" ? ExprKind::kNeg : ExprKind::kPos, at);
      advance();
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary(false);
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary(bool with_namespace) {
    DepthGuard guard(this);
    const Token& token = current();
    if (token.type == TokenType::kName) {
      advance();
      if (token.value == "true" || token.value == "false" || token.value == "True" ||
          token.value == "False") {
        auto node = make_expr(ExprKind::kLiteral, token);
        node->literal = Value::boolean(token.value == "true" || token.value == "True");
        return node;
      }
      if (token.value == "none" || token.value == "None") {
        auto node = make_expr(ExprKind::kLiteral, token);
        node->literal = Value::none();
        return node;
      }
      if (with_namespace && is_op(current(), ".")) {
        advance();
        const Token& attribute = expect(TokenType::kName, "name");
        auto name = make_expr(ExprKind::kName, token);
        name->name = token.value;
        auto node = make_expr(ExprKind::kGetAttr, token);
        node->name = attribute.value;
        node->namespace_ref = true;
        node->children.push_back(std::move(name));
        return node;
      }
      auto node = make_expr(ExprKind::kName, token);
      node->name = token.value;
      return node;
    }
    if (token.type == TokenType::kString) {
      auto node = make_expr(ExprKind::kLiteral, token);
      std::string text = advance().value;
      while (current().type == TokenType::kString) text += advance().value;  // adjacent literals concatenate
      node->literal = Value::string(std::move(text));
      return node;
    }
    if (token.type == TokenType::kInteger || token.type == TokenType::kFloat) {
      auto node = make_expr(ExprKind::kLiteral, token);
      node->literal = token.type == TokenType::kInteger ? Value::integer(token.int_value)
                                                        : Value::number(token.float_value);
      advance();
      return node;
    }
    if (is_op(token, "(")) {
      advance();
      ExprPtr node = parse_tuple(false, true, {}, true);
      expect_op(")");
      return node;
    }
    if (is_op(token, "[")) return parse_list();
    if (is_op(token, "{")) return parse_dict();
    fail("unexpected '" + describe(token) + "'");
  }

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    const Token& t = current();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || is_op(t, ")")) return true;
    if (t.type == TokenType::kName)
      for (const auto& name : extra_end)
        if (t.value == name) return true;
    return false;
  }

  // Jinja's parse_tuple: an expression, or a tuple when commas separate several.
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parentheses, bool with_namespace = false) {
    Token at = current();
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
      if (is_op(current(), ",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) {
        fail("Expected an expression, got '" + describe(current()) + "'");
      }
    }
    auto node = make_expr(ExprKind::kTuple, at);
    node->children = std::move(args);
    return node;
  }

  ExprPtr parse_list() {
    auto node = make_expr(ExprKind::kList, expect_op("["));
    while (!is_op(current(), "]")) {
      if (!node->children.empty()) expect_op(",");
      if (is_op(current(), "]")) break;
      node->children.push_back(parse_expression(true));
    }
    expect_op("]");
    return node;
  }

  ExprPtr parse_dict() {
    auto node = make_expr(ExprKind::kDict, expect_op("{"));
    while (!is_op(current(), "}")) {
      if (!node->children.empty()) expect_op(",");
      if (is_op(current(), "}")) break;
      node->children.push_back(parse_expression(true));
      expect_op(":");
      node->children.push_back(parse_expression(true));
    }
    expect_op("}");
    return node;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(current(), ".") || is_op(current(), "[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op(current(), "|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name(current(), "is")) {
        node = parse_test(std::move(node));
      } else if (is_op(current(), "(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    DepthGuard guard(this);
    const Token& token = advance();
    if (token.value == ".") {
      const Token& attribute = current();
      advance();
      if (attribute.type == TokenType::kName) {
        auto e = make_expr(ExprKind::kGetAttr, token);
        e->name = attribute.value;
        e->children.push_back(std::move(node));
        return e;
      }
      if (attribute.type != TokenType::kInteger) fail("expected name or number", attribute);
      auto e = make_expr(ExprKind::kGetItem, token);
      auto key = make_expr(ExprKind::kLiteral, attribute);
      key->literal = Value::integer(attribute.int_value);
      e->children.push_back(std::move(node));
      e->children.push_back(std::move(key));
      return e;
    }
    // "[": one subscript, a slice, or a comma-separated tuple of them.
    std::vector<ExprPtr> args;
    while (!is_op(current(), "]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    if (args.size() == 1 && args[0]->kind == ExprKind::kSlice && !args[0]->children.empty() &&
        args[0]->children[0] == nullptr && args[0]->name == "slice") {
      auto slice = std::move(args[0]);
      slice->children[0] = std::move(node);
      return slice;
    }
    auto e = make_expr(ExprKind::kGetItem, token);
    e->children.push_back(std::move(node));
    if (args.size() == 1) {
      e->children.push_back(std::move(args[0]));
    } else {
      for (const auto& a : args)
        if (a->kind == ExprKind::kSlice) fail("tuples of slices are not supported", token);
      auto tuple = make_expr(ExprKind::kTuple, token);
      tuple->children = std::move(args);
      e->children.push_back(std::move(tuple));
    }
    return e;
  }

  // One subscript: an expression or start:stop:step. A slice is returned as kSlice with a null
  // first child (filled with the sliced object by parse_subscript) and name "slice".
  ExprPtr parse_subscribed() {
    const Token& at = current();
    ExprPtr start;
    if (is_op(current(), ":")) {
      advance();
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(current(), ":")) return node;
      advance();
      start = std::move(node);
    }
    auto slice = make_expr(ExprKind::kSlice, at);
    slice->name = "slice";
    ExprPtr stop, step;
    if (!is_op(current(), ":") && !is_op(current(), "]") && !is_op(current(), ","))
      stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op(current(), "]") && !is_op(current(), ",")) step = parse_expression(true);
    }
    slice->children.push_back(nullptr);
    slice->children.push_back(std::move(start));
    slice->children.push_back(std::move(stop));
    slice->children.push_back(std::move(step));
    return slice;
  }

  // Parses "( args )" into node->children (after any existing ones) and node->kwargs.
  void parse_call_args(Expr* node) {
    const Token& open = expect_op("(");
    bool require_comma = false;
    while (!is_op(current(), ")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(current(), ")")) break;
      }
      if (is_op(current(), "*") || is_op(current(), "**"))
        fail("*args and **kwargs in calls are not supported by lmx's Jinja interpreter");
      if (current().type == TokenType::kName && is_op(peek(), "=")) {
        std::string key = advance().value;
        advance();
        node->kwargs.emplace_back(key, parse_expression(true));
      } else {
        if (!node->kwargs.empty()) fail("invalid syntax for function call expression", open);
        node->children.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    DepthGuard guard(this);
    auto node = make_expr(ExprKind::kCall, current());
    node->children.push_back(std::move(callee));
    parse_call_args(node.get());
    return node;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op(current(), "|") || start_inline) {
      DepthGuard guard(this);
      if (!start_inline) advance();
      const Token& token = expect(TokenType::kName, "name");
      std::string name = token.value;
      while (is_op(current(), ".")) {
        advance();
        name += "." + expect(TokenType::kName, "name").value;
      }
      auto filter = make_expr(ExprKind::kFilter, token);
      filter->name = name;
      filter->filter = find_filter(name);
      if (!filter->filter) fail("No filter named '" + name + "'.", token);
      filter->children.push_back(std::move(node));
      if (is_op(current(), "(")) parse_call_args(filter.get());
      node = std::move(filter);
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    DepthGuard guard(this);
    const Token& is_token = advance();
    bool negated = skip_name("not");
    const Token& token = expect(TokenType::kName, "name");
    std::string name = token.value;
    while (is_op(current(), ".")) {
      advance();
      name += "." + expect(TokenType::kName, "name").value;
    }
    auto test = make_expr(ExprKind::kTest, is_token);
    test->name = name;
    test->test = find_test(name);
    if (!test->test) fail("No test named '" + name + "'.", token);
    test->children.push_back(std::move(node));
    const Token& next = current();
    if (is_op(next, "(")) {
      parse_call_args(test.get());
    } else if ((next.type == TokenType::kName || next.type == TokenType::kString ||
                next.type == TokenType::kInteger || next.type == TokenType::kFloat || is_op(next, "[") ||
                is_op(next, "{")) &&
               !is_name(next, "else") && !is_name(next, "or") && !is_name(next, "and")) {
      if (is_name(next, "is")) fail("You cannot chain multiple tests with is");
      test->children.push_back(parse_postfix(parse_primary(false)));
    }
    if (!negated) return test;
    auto not_node = make_expr(ExprKind::kNot, is_token);
    not_node->children.push_back(std::move(test));
    return not_node;
  }

  const std::vector<Token>& tokens_;
  const std::string& source_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<std::string> tag_stack_;
  std::vector<std::vector<std::string>> end_token_stack_;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens, const std::string& normalized_source) {
  return Parser(tokens, normalized_source).parse();
}

}  // namespace lmx::jinja
