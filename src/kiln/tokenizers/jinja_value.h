#pragma once
// The values a Jinja template computes with, and the Python semantics they
// follow under jinja2: truthiness, ==, <, str() and repr(), iteration, and
// json.dumps (the `tojson` filter Hugging Face installs). Lists, tuples and
// dicts are immutable once built (jinja2's ImmutableSandboxedEnvironment
// refuses their mutating methods), so values share them by pointer; a
// namespace() is the one mutable object. Dicts keep insertion order, as
// Python's.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kiln::tokenizers::jinja {

class Value;
class Interpreter;

// An error raised while evaluating, before the interpreter adds the template
// position of the node being evaluated. `raised` marks raise_exception().
struct EvalError : std::runtime_error {
  explicit EvalError(const std::string& what, bool raised = false) : std::runtime_error(what), raised(raised) {}
  bool raised;
};

// jinja2's Undefined: prints as "", is false, iterates as empty; anything
// else done with it fails with `message` ("'x' is undefined").
struct Undefined {
  std::string message;
};
struct None {};

struct ListData {
  std::vector<Value> items;
  bool tuple = false;
  std::vector<std::string> fields;  // a named tuple's field names (groupby's grouper/list)
};

struct DictData {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(std::string_view key) const;
  const Value* find(const Value& key) const;
  void set(Value key, Value value);  // replaces the value of an equal key, or appends
};

struct NamespaceData {
  DictData attrs;
};

// A one-shot iterator: what jinja2's select/map/reverse/items... filters
// return. Always true, and a second pass sees nothing.
struct GeneratorData {
  std::vector<Value> items;
  size_t pos = 0;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct FunctionData {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
  bool macro = false;
};

class Value {
 public:
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function, Generator };

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string message) { return Value(Undefined{std::move(message)}); }
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value number(double d) { return Value(d); }
  static Value string(std::string s) { return Value(std::move(s)); }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(DictData d) { return Value(std::make_shared<DictData>(std::move(d))); }
  static Value ns(std::shared_ptr<NamespaceData> n) { return Value(std::move(n)); }
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn, bool macro = false);
  static Value generator(std::vector<Value> items);
  static Value from_list(std::shared_ptr<ListData> l) { return Value(std::move(l)); }

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is(Kind k) const { return kind() == k; }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_string() const { return kind() == Kind::String; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_bool() || is_float(); }  // bool is a Python int
  bool is_list() const { return kind() == Kind::List; }  // list or tuple
  bool is_dict() const { return kind() == Kind::Dict; }

  const std::string& undefined_message() const { return std::get<Undefined>(v_).message; }
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? static_cast<int64_t>(std::get<bool>(v_)) : std::get<int64_t>(v_); }
  double as_float() const { return is_float() ? std::get<double>(v_) : static_cast<double>(as_int()); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<ListData>>(v_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<DictData>>(v_); }
  const std::shared_ptr<NamespaceData>& as_namespace() const { return std::get<std::shared_ptr<NamespaceData>>(v_); }
  const FunctionData& as_function() const { return *std::get<std::shared_ptr<FunctionData>>(v_); }
  GeneratorData& as_generator() const { return *std::get<std::shared_ptr<GeneratorData>>(v_); }
  // Identity of a shared object (Python's `is` for lists, dicts, namespaces...).
  const void* identity() const;

 private:
  using Variant = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<ListData>,
                               std::shared_ptr<DictData>, std::shared_ptr<NamespaceData>,
                               std::shared_ptr<FunctionData>, std::shared_ptr<GeneratorData>>;
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}
  Variant v_;
};

// What a template may build before the size is checked against Interpreter::Limits: widths, indents,
// repeat counts and serialized values (repr, tojson) past this many bytes are refused before they are
// built, so a shared value ([x, x] nested 40 times) or a width of 10**11 cannot exhaust memory.
inline constexpr size_t kMaxBuiltBytes = size_t{64} << 20;
// Throws EvalError when `n` (a width, count or size in bytes) passes kMaxBuiltBytes.
void check_built(int64_t n, const char* what);

// Python's type(x).__name__ as jinja2 reports it ("str", "NoneType", "dict").
std::string type_name(const Value& v);
bool truthy(const Value& v);
// str(v): what {{ v }} prints. Undefined prints "".
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
bool equals(const Value& a, const Value& b);
// Python's a < b; throws EvalError for unorderable types.
bool less(const Value& a, const Value& b);
// The items `for x in v` visits (a dict: its keys; a string: its characters;
// undefined: none). Consumes a generator. Throws for non-iterables.
std::vector<Value> iterate(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);

Value from_json(const nlohmann::ordered_json& j);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // Python's indent, as the string put per level
  std::optional<std::pair<std::string, std::string>> separators;  // (item, key)
  bool sort_keys = false;
};
// json.dumps(v, ...) as Python writes it.
std::string dumps_json(const Value& v, const JsonOptions& options);

}  // namespace kiln::tokenizers::jinja
