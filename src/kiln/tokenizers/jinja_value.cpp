#include "kiln/tokenizers/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "kiln/tokenizers/python_str.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

namespace {

// Deeper values than this (from JSON input or a template's own nesting) are
// refused rather than walked recursively.
constexpr int kMaxNesting = 512;

void check_depth(int depth) {
  if (depth > kMaxNesting) throw EvalError("value nested deeper than " + std::to_string(kMaxNesting) + " levels");
}

// Comparing values that share parts ([x, x] nested n times) walks 2^n items: one comparison stops here.
constexpr int64_t kMaxCompareSteps = 10'000'000;

void charge_compare(int64_t& steps) {
  if (++steps > kMaxCompareSteps)
    throw EvalError("comparison walked more than " + std::to_string(kMaxCompareSteps) + " items");
}

// Python compares int with float exactly.
int compare_numbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) {
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  double x = a.as_float(), y = b.as_float();
  if (std::isnan(x) || std::isnan(y)) return 2;  // unordered
  return x < y ? -1 : x > y ? 1 : 0;
}

bool equals_at(const Value& a, const Value& b, int depth, int64_t& steps);
bool less_at(const Value& a, const Value& b, int depth, int64_t& steps);

bool list_equals(const ListData& x, const ListData& y, int depth, int64_t& steps) {
  if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
  for (size_t i = 0; i < x.items.size(); ++i)
    if (!equals_at(x.items[i], y.items[i], depth + 1, steps)) return false;
  return true;
}

bool equals_at(const Value& a, const Value& b, int depth, int64_t& steps) {
  check_depth(depth);
  charge_compare(steps);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List:
      return list_equals(a.as_list(), b.as_list(), depth, steps);
    case Value::Kind::Dict: {
      const auto& x = a.as_dict().items;
      const auto& y = b.as_dict();
      if (x.size() != y.items.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = y.find(k);
        if (!other || !equals_at(v, *other, depth + 1, steps)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

void repr_to(std::string& out, const Value& v, int depth);

void repr_items(std::string& out, const std::vector<Value>& items, int depth) {
  for (size_t i = 0; i < items.size(); ++i) {
    check_built(static_cast<int64_t>(out.size()), "repr of a value");
    if (i) out += ", ";
    repr_to(out, items[i], depth + 1);
  }
}

void repr_dict(std::string& out, const DictData& d, int depth) {
  out += '{';
  for (size_t i = 0; i < d.items.size(); ++i) {
    check_built(static_cast<int64_t>(out.size()), "repr of a value");
    if (i) out += ", ";
    repr_to(out, d.items[i].first, depth + 1);
    out += ": ";
    repr_to(out, d.items[i].second, depth + 1);
  }
  out += '}';
}

void repr_to(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.kind()) {
    case Value::Kind::Undefined: out += "Undefined"; return;
    case Value::Kind::String: out += pystr::repr(v.as_string()); return;
    case Value::Kind::List: {
      const ListData& l = v.as_list();
      out += l.tuple ? '(' : '[';
      repr_items(out, l.items, depth);
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      return;
    }
    case Value::Kind::Dict: repr_dict(out, v.as_dict(), depth); return;
    case Value::Kind::Namespace:
      out += "<Namespace ";
      repr_dict(out, v.as_namespace()->attrs, depth);
      out += '>';
      return;
    default: out += to_str(v); return;
  }
}

// Python's json string encoder (c_encode_basestring / _ascii).
void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  size_t i = 0;
  while (i < s.size()) {
    auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80) {
      size_t n;
      char32_t c = utf8::decode(s, i, &n);
      if (!ensure_ascii) {
        out.append(s.substr(i, n));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
        out += buf;
      } else {
        char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 | (v >> 10)),
                      static_cast<unsigned>(0xdc00 | (v & 0x3ff)));
        out += buf;
      }
      i += n;
      continue;
    }
    switch (b) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (b < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(b));
          out += buf;
        } else {
          out += static_cast<char>(b);
        }
    }
    ++i;
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return pystr::float_repr(d);
}

struct JsonWriter {
  const JsonOptions& opt;
  std::string item_sep, key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    for (int i = 0; i < level; ++i) {
      check_built(static_cast<int64_t>(out.size() + opt.indent->size()), "tojson of a value");
      out += *opt.indent;
    }
  }

  std::string key_text(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::String: return k.as_string();
      case Value::Kind::Bool: return k.as_bool() ? "true" : "false";
      case Value::Kind::Int: return std::to_string(k.as_int());
      case Value::Kind::Float: return json_float(k.as_float());
      case Value::Kind::None: return "null";
      default: throw EvalError("keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  void write(const Value& v, int level) {
    check_depth(level);
    switch (v.kind()) {
      case Value::Kind::None: out += "null"; return;
      case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::Int: out += std::to_string(v.as_int()); return;
      case Value::Kind::Float: out += json_float(v.as_float()); return;
      case Value::Kind::String: json_string(out, v.as_string(), opt.ensure_ascii); return;
      case Value::Kind::List: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out += "[]";
          return;
        }
        out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          check_built(static_cast<int64_t>(out.size()), "tojson of a value");
          if (i) out += item_sep;
          if (opt.indent) newline(level + 1);
          write(items[i], level + 1);
        }
        if (opt.indent) newline(level);
        out += ']';
        return;
      }
      case Value::Kind::Dict: {
        std::vector<std::pair<std::string, const Value*>> items;
        for (const auto& [k, val] : v.as_dict().items) items.emplace_back(key_text(k), &val);
        if (opt.sort_keys)
          std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        if (items.empty()) {
          out += "{}";
          return;
        }
        out += '{';
        for (size_t i = 0; i < items.size(); ++i) {
          check_built(static_cast<int64_t>(out.size()), "tojson of a value");
          if (i) out += item_sep;
          if (opt.indent) newline(level + 1);
          json_string(out, items[i].first, opt.ensure_ascii);
          out += key_sep;
          write(*items[i].second, level + 1);
        }
        if (opt.indent) newline(level);
        out += '}';
        return;
      }
      default:
        throw EvalError("Object of type " + type_name(v) + " is not JSON serializable");
    }
  }
};

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  check_depth(depth);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::integer(static_cast<int64_t>(u))
                                                   : Value::number(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      DictData d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.items.emplace_back(Value::string(it.key()), from_json_at(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      throw EvalError("unsupported JSON value (binary)");
  }
}

}  // namespace

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : items)
    if (equals(k, key)) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListData>();
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(std::move(l));
}

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn, bool macro) {
  auto f = std::make_shared<FunctionData>();
  f->name = std::move(name);
  f->call = std::move(fn);
  f->macro = macro;
  return Value(std::move(f));
}

Value Value::generator(std::vector<Value> items) {
  auto g = std::make_shared<GeneratorData>();
  g->items = std::move(items);
  return Value(std::move(g));
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& x) -> const void* {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::shared_ptr<ListData>> || std::is_same_v<T, std::shared_ptr<DictData>> ||
                      std::is_same_v<T, std::shared_ptr<NamespaceData>> ||
                      std::is_same_v<T, std::shared_ptr<FunctionData>> ||
                      std::is_same_v<T, std::shared_ptr<GeneratorData>>)
          return x.get();
        else
          return nullptr;
      },
      v_);
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.as_list().tuple ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Function: return v.as_function().macro ? "Macro" : "function";
    case Value::Kind::Generator: return "generator";
  }
  return "object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_float() != 0.0;
    case Value::Kind::String: return !v.as_string().empty();
    case Value::Kind::List: return !v.as_list().items.empty();
    case Value::Kind::Dict: return !v.as_dict().items.empty();
    default: return true;  // namespaces, functions, generators
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return pystr::float_repr(v.as_float());
    case Value::Kind::String: return v.as_string();
    case Value::Kind::Function:
      return v.as_function().macro ? "<Macro '" + v.as_function().name + "'>" : "<function " + v.as_function().name + ">";
    case Value::Kind::Generator: return "<generator object>";
    default: {
      std::string out;
      repr_to(out, v, 0);
      return out;
    }
  }
}

std::string to_repr(const Value& v) {
  std::string out;
  repr_to(out, v, 0);
  return out;
}

void check_built(int64_t n, const char* what) {
  if (n > static_cast<int64_t>(kMaxBuiltBytes))
    throw EvalError(std::string(what) + " too large: " + std::to_string(n) + ", past the " +
                    std::to_string(kMaxBuiltBytes) + " bytes a template may build");
}

bool equals(const Value& a, const Value& b) {
  int64_t steps = 0;
  return equals_at(a, b, 0, steps);
}

bool less(const Value& a, const Value& b) {
  int64_t steps = 0;
  return less_at(a, b, 0, steps);
}

namespace {

bool less_at(const Value& a, const Value& b, int depth, int64_t& steps) {
  check_depth(depth);
  charge_compare(steps);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b) == -1;
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code-point order
  if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!equals_at(x[i], y[i], depth + 1, steps)) return less_at(x[i], y[i], depth + 1, steps);
    return x.size() < y.size();
  }
  if (a.is_undefined()) throw EvalError(a.undefined_message());
  if (b.is_undefined()) throw EvalError(b.undefined_message());
  throw EvalError("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

}  // namespace

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.as_list().items;
    case Value::Kind::Dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.as_dict().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      for (size_t i = 0; i < s.size();) {
        size_t n = utf8::seq_len(static_cast<unsigned char>(s[i]));
        chars.push_back(Value::string(s.substr(i, n)));
        i += n;
      }
      return chars;
    }
    case Value::Kind::Generator: {
      GeneratorData& g = v.as_generator();
      std::vector<Value> rest(g.items.begin() + static_cast<std::ptrdiff_t>(g.pos), g.items.end());
      g.pos = g.items.size();
      return rest;
    }
    default:
      throw EvalError("'" + type_name(v) + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::String:
      if (!item.is_string())
        throw EvalError("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const auto& x : container.as_list().items)
        if (equals(x, item)) return true;
      return false;
    case Value::Kind::Dict: return container.as_dict().find(item) != nullptr;
    case Value::Kind::Generator: {
      GeneratorData& g = container.as_generator();
      while (g.pos < g.items.size())
        if (equals(g.items[g.pos++], item)) return true;
      return false;
    }
    default:
      throw EvalError("argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

std::string dumps_json(const Value& v, const JsonOptions& options) {
  JsonWriter w{options, options.indent ? "," : ", ", ": ", {}};
  if (options.separators) {
    w.item_sep = options.separators->first;
    w.key_sep = options.separators->second;
  }
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace kiln::tokenizers::jinja
