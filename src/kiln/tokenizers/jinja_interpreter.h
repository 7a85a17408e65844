#pragma once
// Evaluates a parsed template. Scoping follows jinja2: `set` in a loop body
// is local to that iteration, `if` opens no scope, a macro sees the scope it
// was defined in (by reference) and its own arguments, namespace() objects
// are the way to carry state out of a loop.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/tokenizers/jinja.h"
#include "kiln/tokenizers/jinja_ast.h"
#include "kiln/tokenizers/jinja_lexer.h"

namespace kiln::tokenizers::jinja {

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value value);
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
 public:
  Interpreter(const Source& source, const RenderOptions& options);
  ~Interpreter();
  std::string render(const Body& body, const DictData& variables);

  // What the built-in filters, tests and functions call back into.
  Value call(const Value& callee, CallArgs& args);
  Value filter(std::string_view name, const Value& subject, CallArgs& args);
  bool test(std::string_view name, const Value& subject, CallArgs& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  std::shared_ptr<NamespaceData> new_namespace();
  // Throws when a string or list of `size` bytes / items would pass the limit.
  void check_size(size_t size) const;
  std::chrono::system_clock::time_point now() const { return now_; }

 private:
  enum class Flow { Normal, Break, Continue };

  const Source& source_;
  RenderLimits limits_;
  std::chrono::system_clock::time_point now_;
  std::string* out_ = nullptr;
  const std::string* root_ = nullptr;  // the template's output (out_ differs while capturing)
  std::vector<std::pair<size_t, size_t>>* generation_spans_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  // Namespaces created while rendering; cleared at the end so that a
  // namespace holding itself does not leak.
  std::vector<std::shared_ptr<NamespaceData>> namespaces_;

  [[noreturn]] void rethrow(const EvalError& e, size_t pos) const;
  void charge();
  void emit(std::string_view text);
  std::string capture(const Body& body, const FramePtr& frame);

  Flow exec(const Body& body, const FramePtr& frame);
  Flow exec(const Stmt& s, const FramePtr& frame);
  Flow exec_for(const Stmt& s, const FramePtr& frame);
  void exec_generation(const Stmt& s, const FramePtr& frame);
  void exec_call_block(const Stmt& s, const FramePtr& frame);
  void assign(const Target& target, const Value& value, Frame& frame);
  Value make_macro(const std::shared_ptr<MacroDef>& def, const FramePtr& frame);
  Value call_macro(const MacroDef& def, const std::weak_ptr<Frame>& scope, CallArgs& args);
  // The `loop` object of iteration i; last_changed is loop.changed()'s memory.
  Value make_loop(size_t i, const std::vector<Value>& items, const std::shared_ptr<Value>& last_changed);

  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_node(const Expr& e, const FramePtr& frame);
  Value lookup(const std::string& name, const Frame& frame);
  CallArgs eval_args(const Expr& e, const FramePtr& frame);
  Value apply_filters(const Expr& chain, const Value& hole, const FramePtr& frame);
  Value compare(const Expr& e, const FramePtr& frame);
  Value slice(const Value& obj, const Expr& s, const FramePtr& frame);
};

// Python's binary arithmetic (+ - * / // % **) on values.
Value arithmetic(BinOp op, const Value& a, const Value& b, const Interpreter& interp);
// Python's printf-style `format % args`.
std::string percent_format(const std::string& format, const Value& args);

}  // namespace kiln::tokenizers::jinja
