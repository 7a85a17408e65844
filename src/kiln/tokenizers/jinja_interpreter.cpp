#include "kiln/tokenizers/jinja_interpreter.h"

#include <algorithm>

#include "kiln/tokenizers/jinja_builtins.h"
#include "kiln/tokenizers/python_str.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

namespace {

// Nested evaluation (expressions inside statements inside macro calls) past
// this depth is refused before it can exhaust the C++ stack: 1000 levels
// take under 3 MB of an 8 MB stack in the AddressSanitizer debug build (the
// largest frames), and jinja2 itself stops at Python's recursion limit
// (1000 frames, several a level) well before.
constexpr int kMaxEvalDepth = 1000;

// A new scope inside `parent` (a block set, filter block, with, loop iteration).
FramePtr child(const FramePtr& parent) {
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  return f;
}

struct DepthGuard {
  explicit DepthGuard(int& d) : d(d) { ++d; }
  ~DepthGuard() { --d; }
  int& d;
};

// jinja2's object_type_repr: how an undefined attribute's owner is named.
std::string owner_name(const Value& obj) {
  if (obj.is_none()) return "None";
  return type_name(obj) + " object";
}

std::optional<int64_t> as_index(const Value& v) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  return std::nullopt;
}

}  // namespace

const Value* Frame::find(std::string_view name) const {
  for (const auto& [k, v] : vars)
    if (k == name) return &v;
  return nullptr;
}

void Frame::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars)
    if (k == name) {
      v = std::move(value);
      return;
    }
  vars.emplace_back(name, std::move(value));
}

Interpreter::Interpreter(const Source& source, const RenderOptions& options)
    : source_(source),
      limits_(options.limits),
      now_(options.now.value_or(std::chrono::system_clock::now())),
      generation_spans_(options.generation_spans) {}

Interpreter::~Interpreter() {
  for (auto& ns : namespaces_) ns->attrs.items.clear();
}

std::string Interpreter::render(const Body& body, const DictData& variables) {
  auto root = std::make_shared<Frame>();
  for (const auto& [k, v] : variables.items)
    if (k.is_string()) root->set(k.as_string(), v);
  std::string out;
  out_ = &out;
  root_ = &out;
  exec(body, root);
  out_ = nullptr;
  root_ = nullptr;
  return out;
}

void Interpreter::rethrow(const EvalError& e, size_t pos) const {
  if (e.raised) throw RaisedError(source_.where(pos) + ": " + e.what(), e.what());
  throw Error(source_.where(pos) + ": " + e.what());
}

void Interpreter::charge() {
  if (++steps_ > limits_.max_steps)
    throw EvalError("template ran past " + std::to_string(limits_.max_steps) +
                    " steps (loop iterations and macro calls)");
}

void Interpreter::check_size(size_t size) const {
  if (size > limits_.max_output_bytes)
    throw EvalError("template built a value or output of more than " + std::to_string(limits_.max_output_bytes) +
                    " bytes");
}

void Interpreter::emit(std::string_view text) {
  check_size(out_->size() + text.size());
  out_->append(text);
}

std::string Interpreter::capture(const Body& body, const FramePtr& frame) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec(body, frame);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

std::shared_ptr<NamespaceData> Interpreter::new_namespace() {
  auto ns = std::make_shared<NamespaceData>();
  namespaces_.push_back(ns);
  return ns;
}

// ---- statements ----

Interpreter::Flow Interpreter::exec(const Body& body, const FramePtr& frame) {
  for (const auto& s : body) {
    Flow f = exec(*s, frame);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const FramePtr& frame) {
  DepthGuard guard(eval_depth_);
  try {
    if (eval_depth_ > kMaxEvalDepth) throw EvalError("template evaluation nested too deeply");
    switch (s.kind) {
      case StmtKind::Text:
        emit(s.text);
        return Flow::Normal;
      case StmtKind::Print:
        emit(to_str(eval(*s.expr, frame)));
        return Flow::Normal;
      case StmtKind::If:
        for (const auto& [test, body] : s.branches)
          if (truthy(eval(*test, frame))) return exec(body, frame);
        return exec(s.else_body, frame);
      case StmtKind::For:
        return exec_for(s, frame);
      case StmtKind::Set:
        assign(s.target, eval(*s.expr, frame), *frame);
        return Flow::Normal;
      case StmtKind::SetBlock: {
        Value v = Value::string(capture(s.body, child(frame)));
        if (s.filter) v = apply_filters(*s.filter, v, frame);
        assign(s.target, v, *frame);
        return Flow::Normal;
      }
      case StmtKind::FilterBlock: {
        Value v = Value::string(capture(s.body, child(frame)));
        emit(to_str(apply_filters(*s.filter, v, frame)));
        return Flow::Normal;
      }
      case StmtKind::Macro:
        frame->set(s.macro->name, make_macro(s.macro, frame));
        return Flow::Normal;
      case StmtKind::CallBlock:
        exec_call_block(s, frame);
        return Flow::Normal;
      case StmtKind::With: {
        std::vector<Value> values;
        for (const auto& [target, expr] : s.assignments) values.push_back(eval(*expr, frame));
        auto inner = child(frame);
        for (size_t i = 0; i < values.size(); ++i) assign(s.assignments[i].first, values[i], *inner);
        exec(s.body, inner);
        return Flow::Normal;
      }
      case StmtKind::Scope:
        exec_generation(s, frame);
        return Flow::Normal;
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
    }
  } catch (const EvalError& e) {
    rethrow(e, s.pos);
  }
  return Flow::Normal;
}

// {% generation %}: its body, and where it lies in the output when tracked.
void Interpreter::exec_generation(const Stmt& s, const FramePtr& frame) {
  if (!generation_spans_) {
    exec(s.body, child(frame));
    return;
  }
  const std::string text = capture(s.body, child(frame));
  const size_t start = utf8::count_chars(*root_);
  generation_spans_->emplace_back(start, start + utf8::count_chars(text));
  emit(text);
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const FramePtr& frame) {
  std::vector<Value> items = iterate(eval(*s.expr, frame));
  if (s.test) {
    std::vector<Value> kept;
    for (auto& item : items) {
      charge();
      auto probe = child(frame);
      assign(s.target, item, *probe);
      if (truthy(eval(*s.test, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  auto last_changed = std::make_shared<Value>();
  for (size_t i = 0; i < items.size(); ++i) {
    charge();
    auto inner = child(frame);
    assign(s.target, items[i], *inner);
    inner->set("loop", make_loop(i, items, last_changed));
    if (exec(s.body, inner) == Flow::Break) break;
  }
  if (items.empty()) exec(s.else_body, child(frame));
  return Flow::Normal;
}

Value Interpreter::make_loop(size_t i, const std::vector<Value>& items, const std::shared_ptr<Value>& last_changed) {
  const auto n = static_cast<int64_t>(items.size());
  const auto k = static_cast<int64_t>(i);
  DictData d;
  auto put = [&d](const char* name, Value v) { d.items.emplace_back(Value::string(name), std::move(v)); };
  put("index", Value::integer(k + 1));
  put("index0", Value::integer(k));
  put("revindex", Value::integer(n - k));
  put("revindex0", Value::integer(n - k - 1));
  put("first", Value::boolean(k == 0));
  put("last", Value::boolean(k + 1 == n));
  put("length", Value::integer(n));
  put("depth", Value::integer(1));
  put("depth0", Value::integer(0));
  put("previtem", k > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  put("nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  put("cycle", Value::function("cycle", [k](Interpreter&, CallArgs& a) {
        if (a.positional.empty()) throw EvalError("no items for cycling given");
        return a.positional[static_cast<size_t>(k) % a.positional.size()];
      }));
  put("changed", Value::function("changed", [last_changed](Interpreter&, CallArgs& a) {
        Value now = Value::list(a.positional, true);
        if (equals(*last_changed, now)) return Value::boolean(false);
        *last_changed = now;
        return Value::boolean(true);
      }));
  return Value::dict(std::move(d));
}

void Interpreter::assign(const Target& t, const Value& value, Frame& frame) {
  switch (t.kind) {
    case Target::Kind::Name:
      frame.set(t.name, value);
      return;
    case Target::Kind::NsAttr: {
      Value ns = lookup(t.name, frame);
      if (!ns.is(Value::Kind::Namespace)) throw EvalError("cannot assign attribute on non-namespace object");
      ns.as_namespace()->attrs.set(Value::string(t.attr), value);
      return;
    }
    case Target::Kind::Tuple: {
      std::vector<Value> items = iterate(value);
      if (items.size() > t.items.size())
        throw EvalError("too many values to unpack (expected " + std::to_string(t.items.size()) + ")");
      if (items.size() < t.items.size())
        throw EvalError("not enough values to unpack (expected " + std::to_string(t.items.size()) + ", got " +
                        std::to_string(items.size()) + ")");
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], frame);
      return;
    }
  }
}

Value Interpreter::make_macro(const std::shared_ptr<MacroDef>& def, const FramePtr& frame) {
  std::weak_ptr<Frame> scope = frame;
  return Value::function(
      def->name, [def, scope](Interpreter& in, CallArgs& a) { return in.call_macro(*def, scope, a); }, true);
}

// jinja2's Macro.__call__: positional arguments first, then keywords for the
// parameters left, then defaults (evaluated in the macro's scope, so they can
// use earlier parameters); a parameter left without any is undefined.
Value Interpreter::call_macro(const MacroDef& m, const std::weak_ptr<Frame>& scope, CallArgs& a) {
  FramePtr parent = scope.lock();
  if (!parent) throw EvalError("macro '" + m.name + "' called after the scope that defined it ended");
  charge();
  if (call_depth_ >= limits_.max_call_depth)
    throw EvalError("macro calls nested deeper than " + std::to_string(limits_.max_call_depth));
  DepthGuard guard(call_depth_);

  const size_t np = m.params.size(), npos = a.positional.size();
  if (npos > np && !m.uses_varargs)
    throw EvalError("macro '" + m.name + "' takes not more than " + std::to_string(np) + " argument(s)");
  std::vector<std::optional<Value>> bound(np);
  for (size_t i = 0; i < std::min(np, npos); ++i) bound[i] = a.positional[i];
  std::vector<std::pair<std::string, Value>> extra;
  for (auto& [k, v] : a.keyword) {
    auto it = std::find(m.params.begin(), m.params.end(), k);
    auto idx = static_cast<size_t>(it - m.params.begin());
    if (it != m.params.end() && idx >= npos && !bound[idx]) bound[idx] = v;
    else extra.emplace_back(k, v);
  }
  const bool implicit_caller =
      m.uses_caller && std::find(m.params.begin(), m.params.end(), "caller") == m.params.end();
  Value caller = Value::undefined("No caller defined");
  if (implicit_caller) {
    auto it = std::find_if(extra.begin(), extra.end(), [](const auto& kv) { return kv.first == "caller"; });
    if (it != extra.end()) {
      caller = it->second;
      extra.erase(it);
    }
  }
  if (!m.uses_kwargs && !extra.empty())
    throw EvalError("macro '" + m.name + "' takes no keyword argument '" + extra.front().first + "'");

  auto f = std::make_shared<Frame>();
  f->parent = parent;
  const size_t first_default = np - m.defaults.size();
  for (size_t i = 0; i < np; ++i) {
    Value v;
    if (bound[i]) v = *bound[i];
    else if (i >= first_default) v = eval(*m.defaults[i - first_default], f);
    else v = Value::undefined("parameter '" + m.params[i] + "' was not provided");
    f->set(m.params[i], std::move(v));
  }
  if (implicit_caller) f->set("caller", caller);
  if (m.uses_kwargs) {
    DictData d;
    for (auto& [k, v] : extra) d.set(Value::string(k), v);
    f->set("kwargs", Value::dict(std::move(d)));
  }
  if (m.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = np; i < npos; ++i) rest.push_back(a.positional[i]);
    f->set("varargs", Value::list(std::move(rest), true));
  }
  return Value::string(capture(m.body, f));
}

void Interpreter::exec_call_block(const Stmt& s, const FramePtr& frame) {
  Value caller = make_macro(s.macro, frame);
  const Expr& call_expr = *s.expr;
  Value callee = eval(*call_expr.subject, frame);
  CallArgs args = eval_args(call_expr, frame);
  args.keyword.emplace_back("caller", caller);
  Value result;
  try {
    result = call(callee, args);
  } catch (const EvalError& e) {
    rethrow(e, call_expr.pos);
  }
  emit(to_str(result));
}

// ---- expressions ----

Value Interpreter::eval(const Expr& e, const FramePtr& frame) {
  DepthGuard guard(eval_depth_);
  try {
    if (eval_depth_ > kMaxEvalDepth) throw EvalError("template evaluation nested too deeply");
    return eval_node(e, frame);
  } catch (const EvalError& err) {
    rethrow(err, e.pos);
  }
}

Value Interpreter::lookup(const std::string& name, const Frame& frame) {
  for (const Frame* f = &frame; f; f = f->parent.get())
    if (const Value* v = f->find(name)) return *v;
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::eval_args(const Expr& e, const FramePtr& frame) {
  CallArgs a;
  for (const auto& arg : e.args) a.positional.push_back(eval(*arg, frame));
  if (e.star_args)
    for (auto& v : iterate(eval(*e.star_args, frame))) a.positional.push_back(std::move(v));
  for (const auto& [k, v] : e.kwargs) a.keyword.emplace_back(k, eval(*v, frame));
  if (e.star_kwargs) {
    Value d = eval(*e.star_kwargs, frame);
    if (!d.is_dict()) throw EvalError("argument after ** must be a mapping, not " + type_name(d));
    for (const auto& [k, v] : d.as_dict().items) {
      if (!k.is_string()) throw EvalError("keywords must be strings");
      a.keyword.emplace_back(k.as_string(), v);
    }
  }
  return a;
}

Value Interpreter::apply_filters(const Expr& chain, const Value& hole, const FramePtr& frame) {
  Value subject = chain.subject ? apply_filters(*chain.subject, hole, frame) : hole;
  CallArgs args = eval_args(chain, frame);
  try {
    return filter(chain.name, subject, args);
  } catch (const EvalError& e) {
    rethrow(e, chain.pos);
  }
}

Value Interpreter::eval_node(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.value;
    case ExprKind::Name:
      return lookup(e.name, *frame);
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& item : e.items) items.push_back(eval(*item, frame));
      return Value::list(std::move(items), e.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      DictData d;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value key = eval(*e.items[i], frame);  // before its value, as Python evaluates them
        d.set(std::move(key), eval(*e.items[i + 1], frame));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::Getattr:
      return getattr(eval(*e.subject, frame), e.name);
    case ExprKind::Getitem: {
      Value obj = eval(*e.subject, frame);
      if (e.index->kind == ExprKind::Slice) return slice(obj, *e.index, frame);
      return getitem(obj, eval(*e.index, frame));
    }
    case ExprKind::Slice:
      throw EvalError("a slice is only valid inside []");
    case ExprKind::Call: {
      Value callee = eval(*e.subject, frame);
      CallArgs args = eval_args(e, frame);
      return call(callee, args);
    }
    case ExprKind::Filter: {
      Value subject = eval(*e.subject, frame);
      CallArgs args = eval_args(e, frame);
      return filter(e.name, subject, args);
    }
    case ExprKind::Test: {
      Value subject = eval(*e.subject, frame);
      CallArgs args = eval_args(e, frame);
      return Value::boolean(test(e.name, subject, args));
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*e.subject, frame)));
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.subject, frame);
      if (v.is_undefined()) throw EvalError(v.undefined_message());
      if (!v.is_number())
        throw EvalError(std::string("bad operand type for unary ") + (e.kind == ExprKind::Neg ? "-" : "+") + ": '" +
                        type_name(v) + "'");
      if (e.kind == ExprKind::Pos) return v.is_float() ? v : Value::integer(v.as_int());
      if (v.is_float()) return Value::number(-v.as_float());
      if (v.as_int() == INT64_MIN) throw EvalError("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::Binary: {
      Value l = eval(*e.left, frame);  // before the right operand, as Python evaluates them
      return arithmetic(e.op, l, eval(*e.right, frame), *this);
    }
    case ExprKind::And: {
      Value l = eval(*e.left, frame);
      return truthy(l) ? eval(*e.right, frame) : l;
    }
    case ExprKind::Or: {
      Value l = eval(*e.left, frame);
      return truthy(l) ? l : eval(*e.right, frame);
    }
    case ExprKind::Concat: {
      std::string s;
      for (const auto& item : e.items) {
        s += to_str(eval(*item, frame));
        check_size(s.size());
      }
      return Value::string(std::move(s));
    }
    case ExprKind::Compare:
      return compare(e, frame);
    case ExprKind::Cond:
      if (truthy(eval(*e.test, frame))) return eval(*e.subject, frame);
      if (e.orelse) return eval(*e.orelse, frame);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  return Value();
}

Value Interpreter::compare(const Expr& e, const FramePtr& frame) {
  Value left = eval(*e.subject, frame);
  for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
    Value right = eval(*e.items[i], frame);
    bool r = false;
    switch (e.cmp_ops[i]) {
      case CmpOp::Eq: r = equals(left, right); break;
      case CmpOp::Ne: r = !equals(left, right); break;
      case CmpOp::Lt: r = less(left, right); break;
      case CmpOp::Gt: r = less(right, left); break;
      case CmpOp::Le: r = less(left, right) || (!less(right, left) && equals(left, right)); break;
      case CmpOp::Ge: r = less(right, left) || (!less(left, right) && equals(left, right)); break;
      case CmpOp::In: r = contains(right, left); break;
      case CmpOp::NotIn: r = !contains(right, left); break;
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interpreter::slice(const Value& obj, const Expr& s, const FramePtr& frame) {
  bool bad = false;
  auto bound = [&](const ExprPtr& p) -> std::optional<int64_t> {
    if (!p) return std::nullopt;
    Value v = eval(*p, frame);
    if (v.is_none()) return std::nullopt;
    if (auto i = as_index(v)) return i;
    bad = true;
    return std::nullopt;
  };
  auto start = bound(s.start), stop = bound(s.stop), step = bound(s.step);
  if (obj.is_undefined()) throw EvalError(obj.undefined_message());
  if (bad || !(obj.is_list() || obj.is_string())) return Value::undefined(owner_name(obj) + " has no element slice");
  const int64_t st = step.value_or(1);
  if (st == 0) throw EvalError("slice step cannot be zero");
  if (obj.is_string()) {
    std::u32string u = utf8::to_u32(obj.as_string());
    std::u32string out;
    for (int64_t i : pystr::slice_indices(static_cast<int64_t>(u.size()), start, stop, st)) out += u[i];
    return Value::string(utf8::from_u32(out));
  }
  const ListData& l = obj.as_list();
  std::vector<Value> out;
  for (int64_t i : pystr::slice_indices(static_cast<int64_t>(l.items.size()), start, stop, st))
    out.push_back(l.items[i]);
  return Value::list(std::move(out), l.tuple);
}

// ---- the environment's getattr / getitem / call ----

// jinja2's getattr: a Python attribute (a method, a namespace member),
// falling back to obj[name].
Value Interpreter::getattr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) throw EvalError(obj.undefined_message());
  if (obj.is(Value::Kind::Namespace)) {
    if (const Value* v = obj.as_namespace()->attrs.find(name)) return *v;
  } else if (auto m = find_method(obj, name)) {
    return *m;
  }
  if (obj.is_list()) {
    const ListData& l = obj.as_list();
    for (size_t i = 0; i < l.fields.size(); ++i)
      if (l.fields[i] == name) return l.items[i];
  }
  if (obj.is_dict())
    if (const Value* v = obj.as_dict().find(name)) return *v;
  return Value::undefined("'" + owner_name(obj) + "' has no attribute '" + name + "'");
}

// jinja2's getitem: obj[key], falling back to the attribute when key is a string.
Value Interpreter::getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw EvalError(obj.undefined_message());
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if (obj.is_list() || obj.is_string()) {
    if (auto i = as_index(key)) {
      if (obj.is_list()) {
        const auto& items = obj.as_list().items;
        int64_t n = static_cast<int64_t>(items.size()), k = *i < 0 ? *i + n : *i;
        if (k >= 0 && k < n) return items[k];
      } else {
        std::u32string u = utf8::to_u32(obj.as_string());
        int64_t n = static_cast<int64_t>(u.size()), k = *i < 0 ? *i + n : *i;
        if (k >= 0 && k < n) return Value::string(utf8::encode(u[k]));
      }
    }
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      if (auto m = find_method(obj, key.as_string())) return *m;
      return Value::undefined("'" + owner_name(obj) + "' has no attribute '" + key.as_string() + "'");
    }
    return getattr(obj, key.as_string());
  }
  return Value::undefined(owner_name(obj) + " has no element " + to_repr(key));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is(Value::Kind::Function)) return callee.as_function().call(*this, args);
  if (callee.is_undefined()) throw EvalError(callee.undefined_message());
  throw EvalError("'" + type_name(callee) + "' object is not callable");
}

Value Interpreter::filter(std::string_view name, const Value& subject, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) throw EvalError("unknown filter '" + std::string(name) + "'");
  return f(*this, subject, args);
}

bool Interpreter::test(std::string_view name, const Value& subject, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) throw EvalError("unknown test '" + std::string(name) + "'");
  return t(*this, subject, args);
}

}  // namespace kiln::tokenizers::jinja
