#include "kiln/tokenizers/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "kiln/tokenizers/jinja_builtins.h"

namespace kiln::tokenizers::jinja {

namespace {

// Deeper nesting of expressions or blocks is refused (a hostile template
// must not exhaust the stack).
constexpr int kMaxDepth = 200;

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "begin of print statement";
    case Tok::VarEnd: return "end of print statement";
    case Tok::BlockBegin: return "begin of statement block";
    case Tok::BlockEnd: return "end of statement block";
    case Tok::String: return "string";
    case Tok::Integer: return "integer";
    case Tok::Float: return "float";
    case Tok::Eof: return "end of template";
    default: return "'" + t.text + "'";
  }
}

// Each node's children are moved onto a work list before the node is freed,
// so every destructor this runs finds no children of its own.
void take_children(Expr& e, std::vector<ExprPtr>& out) {
  for (ExprPtr* p : {&e.subject, &e.index, &e.left, &e.right, &e.test, &e.orelse, &e.start, &e.stop, &e.step,
                     &e.star_args, &e.star_kwargs})
    if (*p) out.push_back(std::move(*p));
  for (ExprPtr& p : e.items)
    if (p) out.push_back(std::move(p));
  for (ExprPtr& p : e.args)
    if (p) out.push_back(std::move(p));
  for (auto& kw : e.kwargs)
    if (kw.second) out.push_back(std::move(kw.second));
}
}  // namespace

Expr::~Expr() {
  std::vector<ExprPtr> pending;
  take_children(*this, pending);
  while (!pending.empty()) {
    ExprPtr e = std::move(pending.back());
    pending.pop_back();
    take_children(*e, pending);
  }
}

namespace {
ExprPtr node(ExprKind kind, size_t pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

StmtPtr stmt(StmtKind kind, size_t pos) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->pos = pos;
  return s;
}

class Parser {
 public:
  Parser(const Source& src, const std::vector<Token>& toks) : src_(src), toks_(toks) {}

  Body parse_template() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail(cur(), "unexpected " + describe(cur()));
    return body;
  }

 private:
  const Source& src_;
  const std::vector<Token>& toks_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;  // the macro / call bodies being parsed, innermost last
  std::vector<std::pair<std::string, size_t>> open_tags_;  // for "missing end tag" messages

  struct Nest {
    explicit Nest(Parser& p) : p(p) {
      if (++p.depth_ > kMaxDepth) p.fail(p.cur(), "template nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    ~Nest() { --p.depth_; }
    Parser& p;
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }
  [[noreturn]] void fail(const Token& t, const std::string& message) const { src_.fail(t.offset, message); }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), std::string("expected '") + op + "', found " + describe(cur()));
    next();
  }
  const Token& expect_name() {
    if (cur().type != Tok::Name) fail(cur(), "expected a name, found " + describe(cur()));
    return next();
  }
  void expect(Tok type, const char* what) {
    if (cur().type != type) fail(cur(), std::string("expected ") + what + ", found " + describe(cur()));
    next();
  }

  // ---- statements ----

  // Statements up to a block tag named in `ends`; leaves that tag's name current.
  Body subparse(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (ends.size()) {
          std::string expected;
          for (const char* e : ends) expected += std::string(expected.empty() ? "" : " or ") + "'" + e + "'";
          const auto& [tag, at] = open_tags_.back();
          src_.fail(t.offset, "unexpected end of template: expected " + expected + " to close the '" + tag +
                                  "' at " + src_.where(at));
        }
        return body;
      }
      if (t.type == Tok::Data) {
        auto s = stmt(StmtKind::Text, t.offset);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        next();
        auto s = stmt(StmtKind::Print, t.offset);
        s->expr = parse_tuple(false, true, {}, false);
        expect(Tok::VarEnd, "end of print statement '}}'");
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (cur().type == Tok::Name &&
            std::any_of(ends.begin(), ends.end(), [&](const char* e) { return cur().text == e; }))
          return body;
        parse_statement(body);
        expect(Tok::BlockEnd, "end of statement block '%}'");
      } else {
        fail(t, "unexpected " + describe(t));
      }
    }
  }

  // The body of a block statement: expects its %}, parses to one of `ends`
  // and returns the end tag's name (consumed).
  Body block_body(std::initializer_list<const char*> ends, std::string* which = nullptr) {
    expect(Tok::BlockEnd, "end of statement block '%}'");
    Body body = subparse(ends);
    if (which) *which = cur().text;
    next();
    return body;
  }

  void parse_statement(Body& out) {
    Nest nest(*this);
    const Token& t = cur();
    if (t.type != Tok::Name) fail(t, "tag name expected");
    const std::string tag = t.text;
    const size_t pos = t.offset;
    open_tags_.emplace_back(tag, pos);
    if (tag == "for") out.push_back(parse_for());
    else if (tag == "if") out.push_back(parse_if());
    else if (tag == "set") out.push_back(parse_set());
    else if (tag == "macro") out.push_back(parse_macro());
    else if (tag == "call") out.push_back(parse_call_block());
    else if (tag == "filter") out.push_back(parse_filter_block());
    else if (tag == "with") out.push_back(parse_with());
    else if (tag == "generation") {
      next();
      auto s = stmt(StmtKind::Scope, pos);
      s->body = block_body({"endgeneration"});
      out.push_back(std::move(s));
      open_tags_.pop_back();
      return;  // block_body consumed the end tag's name; its %} follows
    } else if (tag == "print") {
      next();
      bool first = true;
      while (cur().type != Tok::BlockEnd) {
        if (!first) expect_op(",");
        first = false;
        auto s = stmt(StmtKind::Print, cur().offset);
        s->expr = parse_expression(true);
        out.push_back(std::move(s));
      }
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(t, "'" + tag + "' outside of a loop");
      next();
      out.push_back(stmt(tag == "break" ? StmtKind::Break : StmtKind::Continue, pos));
    } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
               tag == "autoescape") {
      fail(t, "the '" + tag + "' tag is not supported in chat templates");
    } else {
      fail(t, "unknown tag '" + tag + "'");
    }
    open_tags_.pop_back();
  }

  StmtPtr parse_for() {
    const size_t pos = next().offset;
    auto s = stmt(StmtKind::For, pos);
    s->target = parse_assign_target(true, false, {"in"}, false);
    if (!skip_name("in")) fail(cur(), "expected 'in', found " + describe(cur()));
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->test = parse_expression(true);
    if (is_name("recursive")) fail(cur(), "recursive loops are not supported");
    std::string end;
    ++loop_depth_;
    s->body = block_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") s->else_body = block_body({"endfor"});
    return s;
  }

  StmtPtr parse_if() {
    const size_t pos = next().offset;
    auto s = stmt(StmtKind::If, pos);
    while (true) {
      ExprPtr test = parse_tuple(false, false, {}, false);
      std::string end;
      Body body = block_body({"elif", "else", "endif"}, &end);
      s->branches.emplace_back(std::move(test), std::move(body));
      if (end == "elif") continue;
      if (end == "else") s->else_body = block_body({"endif"});
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    const size_t pos = next().offset;
    Target target = parse_assign_target(true, false, {}, true);
    if (skip_op("=")) {
      auto s = stmt(StmtKind::Set, pos);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = stmt(StmtKind::SetBlock, pos);
    s->target = std::move(target);
    s->filter = parse_filter(nullptr, false);
    s->body = block_body({"endset"});
    return s;
  }

  void parse_signature(MacroDef& m) {
    expect_op("(");
    while (!is_op(")")) {
      if (!m.params.empty()) expect_op(",");
      const Token& name = expect_name();
      if (skip_op("=")) m.defaults.push_back(parse_expression(true));
      else if (!m.defaults.empty()) fail(name, "non-default argument follows default argument");
      m.params.push_back(name.text);
    }
    expect_op(")");
  }

  Body macro_body(MacroDef& m, const char* end) {
    macros_.push_back(&m);
    int loops = loop_depth_;
    loop_depth_ = 0;  // a loop outside the macro does not make break legal inside it
    Body body = block_body({end});
    loop_depth_ = loops;
    macros_.pop_back();
    return body;
  }

  StmtPtr parse_macro() {
    const size_t pos = next().offset;
    auto s = stmt(StmtKind::Macro, pos);
    s->macro = std::make_shared<MacroDef>();
    s->macro->pos = pos;
    s->macro->name = expect_name().text;
    parse_signature(*s->macro);
    s->macro->body = macro_body(*s->macro, "endmacro");
    return s;
  }

  StmtPtr parse_call_block() {
    const size_t pos = next().offset;
    auto s = stmt(StmtKind::CallBlock, pos);
    s->macro = std::make_shared<MacroDef>();
    s->macro->name = "caller";
    s->macro->pos = pos;
    if (is_op("(")) parse_signature(*s->macro);
    const Token& at = cur();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::Call) fail(at, "expected a call");
    s->macro->body = macro_body(*s->macro, "endcall");
    return s;
  }

  StmtPtr parse_filter_block() {
    const size_t pos = next().offset;
    auto s = stmt(StmtKind::FilterBlock, pos);
    s->filter = parse_filter(nullptr, true);
    s->body = block_body({"endfilter"});
    return s;
  }

  StmtPtr parse_with() {
    const size_t pos = next().offset;
    auto s = stmt(StmtKind::With, pos);
    while (cur().type != Tok::BlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      Target t = parse_assign_target(true, false, {}, false);
      expect_op("=");
      s->assignments.emplace_back(std::move(t), parse_expression(true));
    }
    s->body = block_body({"endwith"});
    return s;
  }

  Target to_target(const Expr& e) {
    Target t;
    t.pos = e.pos;
    if (e.kind == ExprKind::Name) {
      t.kind = Target::Kind::Name;
      t.name = e.name;
    } else if (e.kind == ExprKind::Tuple) {
      t.kind = Target::Kind::Tuple;
      for (const auto& item : e.items) t.items.push_back(to_target(*item));
    } else {
      src_.fail(e.pos, "can't assign to this expression");
    }
    return t;
  }

  Target parse_assign_target(bool with_tuple, bool name_only, std::initializer_list<const char*> extra_end,
                             bool with_namespace) {
    if (with_namespace && cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
      Target t;
      t.kind = Target::Kind::NsAttr;
      t.pos = cur().offset;
      t.name = next().text;
      next();
      t.attr = expect_name().text;
      return t;
    }
    if (name_only) {
      Target t;
      t.pos = cur().offset;
      t.name = expect_name().text;
      return t;
    }
    ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false) : parse_primary();
    return to_target(*e);
  }

  // ---- expressions ----

  bool is_tuple_end(std::initializer_list<const char*> extra_end) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || (t.type == Tok::Op && t.text == ")")) return true;
    if (t.type == Tok::Eof) return true;
    return t.type == Tok::Name && std::any_of(extra_end.begin(), extra_end.end(), [&](const char* e) { return t.text == e; });
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra_end,
                      bool explicit_parentheses) {
    const size_t pos = cur().offset;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) fail(cur(), "expected an expression, found " + describe(cur()));
    }
    auto e = node(ExprKind::Tuple, pos);
    e->items = std::move(args);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Nest nest(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const size_t pos = next().offset;
      auto c = node(ExprKind::Cond, pos);
      c->test = parse_or();
      if (skip_name("else")) c->orelse = parse_condexpr();
      c->subject = std::move(expr);
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, ExprPtr left, ExprPtr right, size_t pos) {
    auto e = node(kind, pos);
    e->left = std::move(left);
    e->right = std::move(right);
    return e;
  }

  ExprPtr parse_or() {
    const size_t pos = cur().offset;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::Or, std::move(left), parse_and(), pos);
    return left;
  }

  ExprPtr parse_and() {
    const size_t pos = cur().offset;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::And, std::move(left), parse_not(), pos);
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      auto e = node(ExprKind::Not, next().offset);
      e->subject = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t pos = cur().offset;
    ExprPtr first = parse_math1();
    std::vector<CmpOp> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      static const std::pair<const char*, CmpOp> kOps[] = {{"==", CmpOp::Eq}, {"!=", CmpOp::Ne}, {"<", CmpOp::Lt},
                                                           {"<=", CmpOp::Le}, {">", CmpOp::Gt},  {">=", CmpOp::Ge}};
      bool found = false;
      for (const auto& [text, op] : kOps)
        if (is_op(text)) {
          next();
          ops.push_back(op);
          found = true;
          break;
        }
      if (!found) {
        if (skip_name("in")) {
          ops.push_back(CmpOp::In);
        } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
          next();
          next();
          ops.push_back(CmpOp::NotIn);
        } else {
          break;
        }
      }
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = node(ExprKind::Compare, pos);
    e->subject = std::move(first);
    e->cmp_ops = std::move(ops);
    e->items = std::move(operands);
    return e;
  }

  ExprPtr arithmetic(BinOp op, ExprPtr left, ExprPtr right, size_t pos) {
    auto e = binary(ExprKind::Binary, std::move(left), std::move(right), pos);
    e->op = op;
    return e;
  }

  ExprPtr parse_math1() {
    const size_t pos = cur().offset;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      BinOp op = next().text == "+" ? BinOp::Add : BinOp::Sub;
      left = arithmetic(op, std::move(left), parse_concat(), pos);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const size_t pos = cur().offset;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::Concat, pos);
    e->items.push_back(std::move(first));
    while (skip_op("~")) e->items.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    const size_t pos = cur().offset;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string& t = next().text;
      BinOp op = t == "*" ? BinOp::Mul : t == "/" ? BinOp::Div : t == "//" ? BinOp::FloorDiv : BinOp::Mod;
      left = arithmetic(op, std::move(left), parse_pow(), pos);
    }
    return left;
  }

  ExprPtr parse_pow() {
    const size_t pos = cur().offset;
    ExprPtr left = parse_unary(true);
    while (skip_op("**")) left = arithmetic(BinOp::Pow, std::move(left), parse_unary(true), pos);
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    const size_t pos = cur().offset;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(next().text == "-" ? ExprKind::Neg : ExprKind::Pos, pos);
      e->subject = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    Nest nest(*this);
    const Token& t = cur();
    if (t.type == Tok::Name) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        auto e = node(ExprKind::Const, t.offset);
        e->value = Value::boolean(t.text == "true" || t.text == "True");
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        auto e = node(ExprKind::Const, t.offset);
        e->value = Value::none();
        return e;
      }
      if (!macros_.empty()) {
        if (t.text == "caller") macros_.back()->uses_caller = true;
        if (t.text == "varargs") macros_.back()->uses_varargs = true;
        if (t.text == "kwargs") macros_.back()->uses_kwargs = true;
      }
      auto e = node(ExprKind::Name, t.offset);
      e->name = t.text;
      return e;
    }
    if (t.type == Tok::String) {
      auto e = node(ExprKind::Const, t.offset);
      std::string s;
      while (cur().type == Tok::String) s += next().text;
      e->value = Value::string(std::move(s));
      return e;
    }
    if (t.type == Tok::Integer || t.type == Tok::Float) {
      next();
      auto e = node(ExprKind::Const, t.offset);
      e->value = t.type == Tok::Integer ? Value::integer(t.int_value) : Value::number(t.float_value);
      return e;
    }
    if (t.type == Tok::Op && t.text == "(") {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (t.type == Tok::Op && t.text == "[") {
      next();
      auto e = node(ExprKind::List, t.offset);
      while (!is_op("]")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("]")) break;
        e->items.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (t.type == Tok::Op && t.text == "{") {
      next();
      auto e = node(ExprKind::Dict, t.offset);
      while (!is_op("}")) {
        if (!e->items.empty()) expect_op(",");
        if (is_op("}")) break;
        e->items.push_back(parse_expression(true));
        expect_op(":");
        e->items.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail(t, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".") || is_op("[")) e = parse_subscript(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) e = parse_filter(std::move(e), false);
      else if (is_name("is")) e = parse_test(std::move(e));
      else if (is_op("(")) e = parse_call(std::move(e));
      else return e;
    }
  }

  ExprPtr parse_subscript(ExprPtr subject) {
    Nest nest(*this);
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = next();
      if (attr.type == Tok::Name) {
        auto e = node(ExprKind::Getattr, t.offset);
        e->subject = std::move(subject);
        e->name = attr.text;
        return e;
      }
      if (attr.type != Tok::Integer) fail(attr, "expected name or number");
      auto e = node(ExprKind::Getitem, t.offset);
      e->subject = std::move(subject);
      e->index = node(ExprKind::Const, attr.offset);
      e->index->value = Value::integer(attr.int_value);
      return e;
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = node(ExprKind::Getitem, t.offset);
    e->subject = std::move(subject);
    if (args.size() == 1) {
      e->index = std::move(args[0]);
    } else {
      e->index = node(ExprKind::Tuple, t.offset);
      e->index->items = std::move(args);
    }
    return e;
  }

  ExprPtr parse_subscribed() {
    const size_t pos = cur().offset;
    ExprPtr first;
    if (!is_op(":")) {
      first = parse_expression(true);
      if (!is_op(":")) return first;
    }
    next();  // the first ':'
    auto e = node(ExprKind::Slice, pos);
    e->start = std::move(first);
    if (!is_op(":") && !is_op("]") && !is_op(",")) e->stop = parse_expression(true);
    if (skip_op(":"))
      if (!is_op("]") && !is_op(",")) e->step = parse_expression(true);
    return e;
  }

  void parse_call_args(Expr& e) {
    const Token& open = cur();
    expect_op("(");
    bool need_comma = false;
    while (!is_op(")")) {
      if (need_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      auto ensure = [&](bool ok) {
        if (!ok) fail(open, "invalid syntax for function call expression");
      };
      if (skip_op("*")) {
        ensure(!e.star_args && !e.star_kwargs);
        e.star_args = parse_expression(true);
      } else if (skip_op("**")) {
        ensure(!e.star_kwargs);
        e.star_kwargs = parse_expression(true);
      } else if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        ensure(!e.star_kwargs);
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!e.star_args && !e.star_kwargs && e.kwargs.empty());
        e.args.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    Nest nest(*this);
    auto e = node(ExprKind::Call, callee->pos);
    e->subject = std::move(callee);
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(".")) name += "." + expect_name().text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr subject, bool start_inline) {
    while (is_op("|") || start_inline) {
      Nest nest(*this);
      if (!start_inline) next();
      start_inline = false;
      const Token& t = cur();
      std::string name = dotted_name();
      if (!find_filter(name)) {
        if (unsupported_filter(name)) fail(t, "filter '" + name + "' is not supported");
        fail(t, "unknown filter '" + name + "'");
      }
      auto e = node(ExprKind::Filter, t.offset);
      e->name = std::move(name);
      e->subject = std::move(subject);
      if (is_op("(")) parse_call_args(*e);
      subject = std::move(e);
    }
    return subject;
  }

  ExprPtr parse_test(ExprPtr subject) {
    Nest nest(*this);
    const Token& is = next();
    bool negated = skip_name("not");
    const Token& t = cur();
    std::string name = dotted_name();
    if (!find_test(name)) fail(t, "unknown test '" + name + "'");
    auto e = node(ExprKind::Test, is.offset);
    e->name = std::move(name);
    e->subject = std::move(subject);
    const Token& a = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((a.type == Tok::Name || a.type == Tok::String || a.type == Tok::Integer || a.type == Tok::Float ||
                (a.type == Tok::Op && (a.text == "(" || a.text == "[" || a.text == "{"))) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail(a, "you cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    if (!negated) return e;
    auto n = node(ExprKind::Not, is.offset);
    n->subject = std::move(e);
    return n;
  }
};

}  // namespace

Body parse(const Source& source, const std::vector<Token>& tokens) { return Parser(source, tokens).parse_template(); }

}  // namespace kiln::tokenizers::jinja
