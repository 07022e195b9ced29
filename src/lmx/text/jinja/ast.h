// Syntax tree of a parsed Jinja template: expressions and statements with their source positions.
#pragma once

#include "lmx/text/jinja/value.h"
#include "lmx/text/jinja/value_ops.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace lmx::jinja {

struct FilterSpec;
struct TestSpec;

enum class ExprKind : uint8_t {
  kLiteral,   // literal
  kName,      // name
  kList,      // children: items
  kTuple,     // children: items
  kDict,      // children: key0, value0, key1, value1, ...
  kGetAttr,   // children[0] . name
  kGetItem,   // children[0] [ children[1] ]
  kSlice,     // children[0] [ children[1] : children[2] : children[3] ] (null = omitted)
  kCall,      // children[0] ( children[1..] , kwargs )
  kFilter,    // children[0] | name ( children[1..], kwargs ); children[0] null inside filter blocks
  kTest,      // children[0] is name ( children[1..], kwargs )
  kNot,       // not children[0]
  kNeg,       // -children[0]
  kPos,       // +children[0]
  kBinary,    // children[0] op children[1]
  kConcat,    // children joined with ~
  kCompare,   // children[0] ops[0] children[1] ops[1] children[2] ...
  kAnd,       // children[0] and children[1]
  kOr,        // children[0] or children[1]
  kCondExpr,  // children[1] if children[0] else children[2] (children[2] may be null)
};

enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  int column = 0;
  Value literal;
  std::string name;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  const FilterSpec* filter = nullptr;  // kFilter, resolved while parsing
  const TestSpec* test = nullptr;      // kTest, resolved while parsing
  bool namespace_ref = false;          // kGetAttr parsed as an assignment target `ns.attr`
};

// Left-hand side of an assignment or loop variable.
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNamespaceAttribute } kind = Kind::kName;
  std::string name;           // kName, and the namespace variable of kNamespaceAttribute
  std::string attribute;      // kNamespaceAttribute
  std::vector<Target> items;  // kTuple
};

enum class StmtKind : uint8_t {
  kData,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (test, body); else_body
  kFor,          // for target in expr [if condition] ... [else ...]
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter] ... endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call[(params)] expr ... endcall
  kFilterBlock,  // filter expr ... endfilter
  kWith,         // with name = expr, ... body
  kBreak,
  kContinue,
  kScope,  // a body rendered in place ({% generation %} of transformers)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;  // kFor inline filter
  ExprPtr filter;     // kSetBlock filter chain (innermost input null)
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  // kMacro / kCallBlock signature: params with defaults for the last defaults.size().
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  bool uses_caller = false;
  bool uses_varargs = false;
  bool uses_kwargs = false;
  // kFor: whether the body mentions `loop` anywhere (else no LoopContext is built).
  bool uses_loop = true;
  // kWith
  std::vector<std::pair<Target, ExprPtr>> assignments;
};

}  // namespace lmx::jinja
