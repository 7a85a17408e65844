#pragma once
// The syntax tree of a parsed Jinja template. Every node keeps the byte
// offset of its first token in Source::text for error messages.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tokenizers/jinja_value.h"

namespace kiln::tokenizers::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  Const,     // value
  Name,      // name
  List,      // items
  Tuple,     // items
  Dict,      // items: key, value, key, value...
  Getattr,   // subject.name
  Getitem,   // subject[index]
  Slice,     // start:stop:step (each may be null); only as a Getitem index
  Call,      // subject(args, kwargs, *star_args, **star_kwargs)
  Filter,    // subject|name(args...); subject null in a filter block or `set x | f`
  Test,      // subject is name(args...)
  Not,       // not subject
  Neg,       // -subject
  Pos,       // +subject
  Binary,    // left op right (arithmetic)
  And,       // left and right
  Or,        // left or right
  Concat,    // items joined with ~
  Compare,   // subject cmp_ops[0] items[0] cmp_ops[1] items[1] ...
  Cond,      // subject if test else orelse (orelse may be null)
};

enum class BinOp { Add, Sub, Mul, Div, FloorDiv, Mod, Pow };
enum class CmpOp { Eq, Ne, Lt, Le, Gt, Ge, In, NotIn };

struct Expr {
  ExprKind kind;
  size_t pos = 0;
  Value value;
  std::string name;
  BinOp op = BinOp::Add;
  std::vector<CmpOp> cmp_ops;
  ExprPtr subject, index, left, right, test, orelse, start, stop, step;
  std::vector<ExprPtr> items;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr star_args, star_kwargs;

  Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;
  // Frees the subtree with a loop, not by recursion: a left-nested chain
  // (`1 + 1 + ...` 100000 times) parses into a tree that deep, and its
  // recursive destruction would overflow the stack.
  ~Expr();
};

// What a `set` or `for` assigns to: a name, a tuple of targets, or ns.attr.
struct Target {
  enum class Kind { Name, Tuple, NsAttr } kind = Kind::Name;
  size_t pos = 0;
  std::string name, attr;
  std::vector<Target> items;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroDef {
  std::string name;
  size_t pos = 0;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  // Whether the body names these (jinja2 then accepts extra arguments or a caller).
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

enum class StmtKind {
  Text,         // text
  Print,        // {{ expr }}
  If,           // branches (test, body)..., else_body
  For,          // for target in expr [if test] body [else else_body]
  Set,          // set target = expr
  SetBlock,     // set target [| filter] body endset
  Macro,        // macro
  CallBlock,    // call[(macro->params)] expr body(macro->body) endcall
  FilterBlock,  // filter filter body endfilter
  With,         // with targets = values body endwith
  Break,
  Continue,
  Scope,        // HF's {% generation %} body {% endgeneration %}: renders its body
};

struct Stmt {
  StmtKind kind;
  size_t pos = 0;
  std::string text;
  ExprPtr expr, test, filter;
  Target target;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body, else_body;
  std::shared_ptr<MacroDef> macro;
  std::vector<std::pair<Target, ExprPtr>> assignments;  // with
};

}  // namespace kiln::tokenizers::jinja
