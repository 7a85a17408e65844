// jinja2's built-in filters and tests (filters.py, tests.py) with Hugging
// Face's `tojson`. Filters that return generators in jinja2 (select, map,
// reverse, items, unique, batch, slice) return one-shot generator values
// here too: always true, consumed by the first pass.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "kiln/tokenizers/jinja_args.h"
#include "kiln/tokenizers/jinja_builtins.h"
#include "kiln/tokenizers/jinja_interpreter.h"
#include "kiln/tokenizers/python_str.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

std::vector<Value> bind(const std::string& fn, const CallArgs& args, std::initializer_list<Param> params) {
  std::vector<std::optional<Value>> out(params.size());
  if (args.positional.size() > params.size())
    throw EvalError(fn + "() takes at most " + std::to_string(params.size()) + " arguments (" +
                    std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [k, v] : args.keyword) {
    size_t i = 0;
    for (const Param& p : params) {
      if (k == p.name) break;
      ++i;
    }
    if (i == params.size()) throw EvalError(fn + "() got an unexpected keyword argument '" + k + "'");
    if (out[i]) throw EvalError(fn + "() got multiple values for argument '" + k + "'");
    out[i] = v;
  }
  std::vector<Value> values;
  size_t i = 0;
  for (const Param& p : params) {
    if (out[i]) values.push_back(*out[i]);
    else if (p.fallback) values.push_back(*p.fallback);
    else throw EvalError(fn + "() missing required argument '" + p.name + "'");
    ++i;
  }
  return values;
}

int64_t int_arg(const Value& v, const std::string& what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  if (v.is_undefined()) throw EvalError(v.undefined_message());
  throw EvalError(what + ": '" + type_name(v) + "' object cannot be interpreted as an integer");
}

namespace {

using Args = CallArgs;

Value str(std::string s) { return Value::string(std::move(s)); }

// jinja2's make_attrgetter: "a.b.0" looked up part by part with getitem.
std::vector<Value> attribute_parts(const Value& attribute) {
  std::vector<Value> parts;
  if (attribute.is_none()) return parts;
  if (!attribute.is_string()) return {attribute};
  for (const std::string& p : pystr::split(attribute.as_string(), std::string("."))) {
    bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    parts.push_back(digits ? Value::integer(std::strtoll(p.c_str(), nullptr, 10)) : str(p));
  }
  return parts;
}

Value get_path(Interpreter& in, Value item, const std::vector<Value>& parts, const Value& fallback = Value::none()) {
  for (const Value& part : parts) {
    item = in.getitem(item, part);
    if (!fallback.is_none() && item.is_undefined()) item = fallback;
  }
  return item;
}

Value ignore_case(const Value& v) { return v.is_string() ? str(pystr::lower(v.as_string())) : v; }

// Python's stable sorted(items, key=..., reverse=...).
void sort_by_keys(std::vector<Value>& items, std::vector<Value> keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return reverse ? less(keys[b], keys[a]) : less(keys[a], keys[b]); });
  std::vector<Value> sorted;
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

int64_t len(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(pystr::length(v.as_string()));
    case Value::Kind::List: return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::Dict: return static_cast<int64_t>(v.as_dict().items.size());
    default: throw EvalError("object of type '" + type_name(v) + "' has no len()");
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Python's float(str): surrounding whitespace, underscores between digits,
// "inf" / "nan" in any case.
std::optional<double> parse_float(std::string s) {
  s = pystr::strip(s, std::nullopt);
  std::string t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 == s.size() || !std::isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !std::isdigit(static_cast<unsigned char>(s[i + 1])))
        return std::nullopt;
      continue;
    }
    t += s[i];
  }
  if (t.empty()) return std::nullopt;
  std::string low = pystr::lower(t);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    return low[0] == '-' ? -v : v;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return v;
}

// Python's int(str, base) for base 10 (and prefixes with base 0/2/8/16).
std::optional<int64_t> parse_int(std::string s, int64_t base) {
  s = pystr::strip(s, std::nullopt);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    neg = s[0] == '-';
    s.erase(0, 1);
  }
  auto prefixed = [&](char p) {
    return s.size() > 2 && s[0] == '0' && (s[1] == p || s[1] == std::toupper(static_cast<unsigned char>(p)));
  };
  if ((base == 16 || base == 0) && prefixed('x')) base = 16, s.erase(0, 2);
  else if ((base == 8 || base == 0) && prefixed('o')) base = 8, s.erase(0, 2);
  else if ((base == 2 || base == 0) && prefixed('b')) base = 2, s.erase(0, 2);
  if (base == 0) base = 10;
  if (s.empty() || s.front() == '_' || s.back() == '_' || s.find("__") != std::string::npos) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c == '_') continue;
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : std::isalpha(static_cast<unsigned char>(c)) ? std::tolower(static_cast<unsigned char>(c)) - 'a' + 10
                                                           : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v))
      throw EvalError("integer overflow (integers are 64-bit here)");
  }
  return neg ? -v : v;
}

// ---- filters ----

Value f_abs(Interpreter&, const Value& v, Args& a) {
  bind("abs", a, {});
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw EvalError("integer overflow (integers are 64-bit here)");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_undefined()) throw EvalError(v.undefined_message());
  throw EvalError("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interpreter&, const Value& v, Args& a) {
  auto p = bind("attr", a, {{"name", {}}});
  if (!p[0].is_string()) throw EvalError("attribute name must be string");
  const std::string& name = p[0].as_string();
  if (v.is(Value::Kind::Namespace)) {
    if (const Value* x = v.as_namespace()->attrs.find(name)) return *x;
  } else if (!v.is_undefined()) {
    if (auto m = find_method(v, name)) return *m;
  }
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

Value f_batch(Interpreter&, const Value& v, Args& a) {
  auto p = bind("batch", a, {{"linecount", {}}, {"fill_with", Value::none()}});
  int64_t n = int_arg(p[0], "batch");
  if (!p[1].is_none()) check_built(n * static_cast<int64_t>(sizeof(Value)), "batch's filled rows");
  std::vector<Value> out, cur;
  for (auto& item : iterate(v)) {
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
    cur.push_back(item);
  }
  if (!cur.empty()) {
    if (!p[1].is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(p[1]);
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::generator(std::move(out));
}

Value f_capitalize(Interpreter&, const Value& v, Args& a) {
  bind("capitalize", a, {});
  return str(pystr::capitalize(to_str(v)));
}

Value f_center(Interpreter&, const Value& v, Args& a) {
  auto p = bind("center", a, {{"width", Value::integer(80)}});
  std::string s = to_str(v);
  int64_t width = int_arg(p[0], "center"), n = static_cast<int64_t>(pystr::length(s));
  if (width <= n) return str(s);
  check_built(width, "center width");
  int64_t marg = width - n, left = marg / 2 + (marg & width & 1);
  return str(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
}

Value f_default(Interpreter&, const Value& v, Args& a) {
  auto p = bind("default", a, {{"default_value", str("")}, {"boolean", Value::boolean(false)}});
  if (v.is_undefined() || (truthy(p[1]) && !truthy(v))) return p[0];
  return v;
}

Value f_dictsort(Interpreter&, const Value& v, Args& a) {
  auto p = bind("dictsort", a,
                {{"case_sensitive", Value::boolean(false)}, {"by", str("key")}, {"reverse", Value::boolean(false)}});
  if (!v.is_dict()) throw EvalError("dictsort expects a mapping, not " + type_name(v));
  size_t pos;
  if (p[1].is_string() && p[1].as_string() == "key") pos = 0;
  else if (p[1].is_string() && p[1].as_string() == "value") pos = 1;
  else throw EvalError("You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items, keys;
  for (const auto& [k, val] : v.as_dict().items) {
    items.push_back(Value::list({k, val}, true));
    const Value& key = pos == 0 ? k : val;
    keys.push_back(truthy(p[0]) ? key : ignore_case(key));
  }
  sort_by_keys(items, std::move(keys), truthy(p[2]));
  return Value::list(std::move(items));
}

Value f_escape(Interpreter&, const Value& v, Args& a) {
  bind("escape", a, {});
  return str(html_escape(to_str(v)));
}

Value f_first(Interpreter&, const Value& v, Args& a) {
  bind("first", a, {});
  if (v.is(Value::Kind::Generator)) {
    GeneratorData& g = v.as_generator();
    if (g.pos < g.items.size()) return g.items[g.pos++];
  } else {
    auto items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_float(Interpreter&, const Value& v, Args& a) {
  auto p = bind("float", a, {{"default", Value::number(0.0)}});
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  return p[0];
}

Value f_format(Interpreter&, const Value& v, Args& a) {
  if (!a.positional.empty() && !a.keyword.empty())
    throw EvalError("can't handle positional and keyword arguments at the same time");
  if (!a.keyword.empty()) {
    DictData d;
    for (const auto& [k, x] : a.keyword) d.set(str(k), x);
    return str(percent_format(to_str(v), Value::dict(std::move(d))));
  }
  return str(percent_format(to_str(v), Value::list(a.positional, true)));
}

Value f_groupby(Interpreter& in, const Value& v, Args& a) {
  auto p = bind("groupby", a, {{"attribute", {}}, {"default", Value::none()}, {"case_sensitive", Value::boolean(false)}});
  auto parts = attribute_parts(p[0]);
  const bool cs = truthy(p[2]);
  std::vector<Value> items = iterate(v), keys;
  for (const auto& item : items) {
    Value k = get_path(in, item, parts, p[1]);
    keys.push_back(cs ? k : ignore_case(k));
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return less(keys[x], keys[y]); });
  std::vector<Value> groups;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    std::vector<Value> members;
    while (j < order.size() && equals(keys[order[j]], keys[order[i]])) members.push_back(items[order[j++]]);
    Value grouper = cs ? keys[order[i]] : get_path(in, members.front(), parts, p[1]);
    auto l = std::make_shared<ListData>();
    l->items = {grouper, Value::list(std::move(members))};
    l->tuple = true;
    l->fields = {"grouper", "list"};
    groups.push_back(Value::from_list(std::move(l)));
    i = j;
  }
  return Value::list(std::move(groups));
}

Value f_indent(Interpreter&, const Value& v, Args& a) {
  auto p = bind("indent", a, {{"width", Value::integer(4)}, {"first", Value::boolean(false)}, {"blank", Value::boolean(false)}});
  const int64_t width = p[0].is_string() ? 0 : int_arg(p[0], "indent");
  check_built(width, "indent width");
  std::string indention = p[0].is_string() ? p[0].as_string() : std::string(static_cast<size_t>(std::max<int64_t>(0, width)), ' ');
  std::string s = to_str(v) + "\n";  // jinja2 appends a newline before splitlines()
  std::vector<std::string> lines = pystr::splitlines(s);
  std::string rv;
  if (truthy(p[2])) {
    for (size_t i = 0; i < lines.size(); ++i) {
      rv += (i ? "\n" + indention : "") + lines[i];
      check_built(static_cast<int64_t>(rv.size()), "indent's text");
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
      check_built(static_cast<int64_t>(rv.size()), "indent's text");
    }
  }
  if (truthy(p[1])) rv = indention + rv;
  return str(rv);
}

Value f_int(Interpreter&, const Value& v, Args& a) {
  auto p = bind("int", a, {{"default", Value::integer(0)}, {"base", Value::integer(10)}});
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    double d = v.as_float();
    if (std::isnan(d) || std::isinf(d)) throw EvalError("cannot convert float " + to_str(v) + " to integer");
    if (std::fabs(d) >= 9.2e18) throw EvalError("integer overflow (integers are 64-bit here)");
    return Value::integer(static_cast<int64_t>(std::trunc(d)));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), int_arg(p[1], "int"))) return Value::integer(*i);
    if (auto d = parse_float(v.as_string())) {
      if (std::isnan(*d) || std::isinf(*d)) throw EvalError("cannot convert float to integer");
      return Value::integer(static_cast<int64_t>(std::trunc(*d)));
    }
  }
  return p[0];
}

Value f_items(Interpreter&, const Value& v, Args& a) {
  bind("items", a, {});
  if (v.is_undefined()) return Value::generator({});
  if (!v.is_dict()) throw EvalError("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().items) out.push_back(Value::list({k, val}, true));
  return Value::generator(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, Args& a) {
  auto p = bind("join", a, {{"d", str("")}, {"attribute", Value::none()}});
  auto parts = attribute_parts(p[1]);
  std::string sep = to_str(p[0]), out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(p[1].is_none() ? item : get_path(in, item, parts));
    in.check_size(out.size());
  }
  return str(std::move(out));
}

Value f_last(Interpreter&, const Value& v, Args& a) {
  bind("last", a, {});
  if (v.is(Value::Kind::Generator)) throw EvalError("'generator' object is not reversible");
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_length(Interpreter&, const Value& v, Args& a) {
  bind("length", a, {});
  return Value::integer(len(v));
}

Value f_list(Interpreter&, const Value& v, Args& a) {
  bind("list", a, {});
  return Value::list(iterate(v));
}

Value f_lower(Interpreter&, const Value& v, Args& a) {
  bind("lower", a, {});
  return str(pystr::lower(to_str(v)));
}

Value f_upper(Interpreter&, const Value& v, Args& a) {
  bind("upper", a, {});
  return str(pystr::upper(to_str(v)));
}

Value f_map(Interpreter& in, const Value& v, Args& a) {
  if (!truthy(v)) return Value::generator({});
  std::vector<Value> out;
  if (a.positional.empty()) {
    Value attribute, fallback = Value::none();
    bool have = false;
    for (const auto& [k, x] : a.keyword) {
      if (k == "attribute") attribute = x, have = true;
      else if (k == "default") fallback = x;
      else throw EvalError("Unexpected keyword argument '" + k + "'");
    }
    if (!have) throw EvalError("map requires a filter argument");
    auto parts = attribute_parts(attribute);
    for (const auto& item : iterate(v)) out.push_back(get_path(in, item, parts, fallback));
    return Value::generator(std::move(out));
  }
  if (!a.positional[0].is_string()) throw EvalError("map requires a filter name");
  std::string name = a.positional[0].as_string();
  if (!find_filter(name)) throw EvalError("No filter named '" + name + "'.");
  for (const auto& item : iterate(v)) {
    Args rest;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    out.push_back(in.filter(name, item, rest));
  }
  return Value::generator(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, Args& a, bool max, const char* fn) {
  auto p = bind(fn, a, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  auto items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto parts = attribute_parts(p[1]);
  auto key = [&](const Value& item) {
    Value k = get_path(in, item, parts);
    return truthy(p[0]) ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (max ? less(best_key, k) : less(k, best_key)) best = i, best_key = k;
  }
  return items[best];
}

Value f_max(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, true, "max"); }
Value f_min(Interpreter& in, const Value& v, Args& a) { return min_max(in, v, a, false, "min"); }

// select / reject / selectattr / rejectattr
Value select_or_reject(Interpreter& in, const Value& v, Args& a, bool keep, bool lookup_attr) {
  if (!truthy(v)) return Value::generator({});
  size_t off = 0;
  std::vector<Value> parts;
  if (lookup_attr) {
    if (a.positional.empty()) throw EvalError("Missing parameter for attribute name");
    parts = attribute_parts(a.positional[0]);
    off = 1;
  }
  std::string test;
  if (a.positional.size() > off) {
    if (!a.positional[off].is_string()) throw EvalError("test name must be a string");
    test = a.positional[off].as_string();
    if (!find_test(test)) throw EvalError("No test named '" + test + "'.");
  }
  std::vector<Value> out;
  for (const auto& item : iterate(v)) {
    Value x = lookup_attr ? get_path(in, item, parts) : item;
    bool r;
    if (test.empty()) {
      r = truthy(x);
    } else {
      Args rest;
      rest.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(off + 1), a.positional.end());
      rest.keyword = a.keyword;
      r = in.test(test, x, rest);
    }
    if (r == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value f_select(Interpreter& in, const Value& v, Args& a) { return select_or_reject(in, v, a, true, false); }
Value f_reject(Interpreter& in, const Value& v, Args& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, Args& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, Args& a) { return select_or_reject(in, v, a, false, true); }

Value f_replace(Interpreter& in, const Value& v, Args& a) {
  auto p = bind("replace", a, {{"old", {}}, {"new", {}}, {"count", Value::none()}});
  int64_t count = p[2].is_none() ? -1 : int_arg(p[2], "replace");
  std::string out = pystr::replace(to_str(v), to_str(p[0]), to_str(p[1]), count);
  in.check_size(out.size());
  return str(std::move(out));
}

Value f_reverse(Interpreter&, const Value& v, Args& a) {
  bind("reverse", a, {});
  if (v.is_string()) {
    std::u32string u = utf8::to_u32(v.as_string());
    std::reverse(u.begin(), u.end());
    return str(utf8::from_u32(u));
  }
  bool generator = v.is(Value::Kind::Generator);
  auto items = iterate(v);
  std::reverse(items.begin(), items.end());
  return generator ? Value::list(std::move(items)) : Value::generator(std::move(items));
}

// Python's round(x, n): correctly rounded, ties to even on the exact binary value.
double round_half_even(double x, int64_t digits) {
  if (std::isnan(x) || std::isinf(x)) return x;
  if (digits > 300) return x;
  char buf[512];
  if (digits >= 0) {
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  if (digits < -308) return std::copysign(0.0, x);
  double p = std::pow(10.0, static_cast<double>(-digits));
  std::snprintf(buf, sizeof buf, "%.0f", x / p);
  return std::strtod(buf, nullptr) * p;
}

Value f_round(Interpreter&, const Value& v, Args& a) {
  auto p = bind("round", a, {{"precision", Value::integer(0)}, {"method", str("common")}});
  std::string method = to_str(p[1]);
  if (method != "common" && method != "ceil" && method != "floor")
    throw EvalError("method must be common, ceil or floor");
  if (!v.is_number()) throw EvalError("type " + type_name(v) + " doesn't define __round__ method");
  int64_t digits = int_arg(p[0], "round");
  if (method == "common") {
    if (!v.is_float()) return Value::integer(v.as_int());  // round(int, n) stays an int
    return Value::number(round_half_even(v.as_float(), digits));
  }
  double scale = std::pow(10.0, static_cast<double>(digits));
  double x = v.as_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_safe(Interpreter&, const Value& v, Args& a) {
  bind("safe", a, {});
  return str(to_str(v));
}

Value f_slice(Interpreter&, const Value& v, Args& a) {
  auto p = bind("slice", a, {{"slices", {}}, {"fill_with", Value::none()}});
  auto seq = iterate(v);
  int64_t slices = int_arg(p[0], "slice");
  if (slices <= 0) throw EvalError("integer division or modulo by zero");
  check_built(slices * static_cast<int64_t>(sizeof(Value)), "slice's parts");
  int64_t length = static_cast<int64_t>(seq.size()), per = length / slices, extra = length % slices, offset = 0;
  std::vector<Value> out;
  for (int64_t s = 0; s < slices; ++s) {
    int64_t start = offset + s * per;
    if (s < extra) ++offset;
    int64_t end = offset + (s + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (!p[1].is_none() && s >= extra) part.push_back(p[1]);
    out.push_back(Value::list(std::move(part)));
  }
  return Value::generator(std::move(out));
}

Value f_sort(Interpreter& in, const Value& v, Args& a) {
  auto p = bind("sort", a, {{"reverse", Value::boolean(false)}, {"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  auto items = iterate(v);
  std::vector<std::vector<Value>> attrs;
  if (p[2].is_string())
    for (const auto& one : pystr::split(p[2].as_string(), std::string(","))) attrs.push_back(attribute_parts(str(one)));
  else
    attrs.push_back(attribute_parts(p[2]));
  std::vector<Value> keys;
  for (const auto& item : items) {
    std::vector<Value> k;
    for (const auto& parts : attrs) {
      Value x = get_path(in, item, parts);
      k.push_back(truthy(p[1]) ? x : ignore_case(x));
    }
    keys.push_back(k.size() == 1 ? k[0] : Value::list(std::move(k)));
  }
  sort_by_keys(items, std::move(keys), truthy(p[0]));
  return Value::list(std::move(items));
}

Value f_string(Interpreter&, const Value& v, Args& a) {
  bind("string", a, {});
  return str(to_str(v));
}

Value f_striptags(Interpreter&, const Value& v, Args& a) {
  bind("striptags", a, {});
  std::string s = to_str(v), out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      size_t e = s.find("-->", i + 4);
      if (e == std::string::npos) break;
      i = e + 3;
    } else if (s[i] == '<' && s.find('>', i + 1) != std::string::npos) {
      i = s.find('>', i + 1) + 1;
    } else {
      out += s[i++];
    }
  }
  std::string joined;
  for (const auto& w : pystr::split(out, std::nullopt)) joined += (joined.empty() ? "" : " ") + w;
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""}, {"&#34;", "\""}, {"&#39;", "'"}, {"&amp;", "&"}};
  for (const auto& [from, to] : kEntities) joined = pystr::replace(joined, from, to);
  return str(joined);
}

Value f_sum(Interpreter& in, const Value& v, Args& a) {
  auto p = bind("sum", a, {{"attribute", Value::none()}, {"start", Value::integer(0)}});
  auto parts = attribute_parts(p[0]);
  Value total = p[1];
  for (const auto& item : iterate(v)) total = arithmetic(BinOp::Add, total, get_path(in, item, parts), in);
  return total;
}

// jinja2's title filter (not str.title): words start after "-", whitespace,
// "(", "{", "[" or "<"; each word's first character upper, the rest lower.
Value f_title(Interpreter&, const Value& v, Args& a) {
  bind("title", a, {});
  std::u32string u = utf8::to_u32(to_str(v));
  auto sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || pystr::is_space(c); };
  std::string out;
  for (size_t i = 0; i < u.size();) {
    size_t j = i;
    bool is_sep = sep(u[i]);
    while (j < u.size() && sep(u[j]) == is_sep) ++j;
    std::u32string_view item(u.data() + i, j - i);
    out += pystr::upper(utf8::encode(item[0])) + pystr::lower(utf8::from_u32(item.substr(1)));
    i = j;
  }
  return str(out);
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), no HTML escaping.
Value f_tojson(Interpreter&, const Value& v, Args& a) {
  auto p = bind("tojson", a, {{"ensure_ascii", Value::boolean(false)}, {"indent", Value::none()},
                              {"separators", Value::none()}, {"sort_keys", Value::boolean(false)}});
  JsonOptions o;
  o.ensure_ascii = truthy(p[0]);
  if (p[1].is_string()) o.indent = p[1].as_string();
  else if (!p[1].is_none()) {
    const int64_t indent = int_arg(p[1], "indent");
    check_built(indent, "tojson indent");
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent)), ' ');
  }
  if (!p[2].is_none()) {
    auto seps = iterate(p[2]);
    if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string())
      throw EvalError("separators must be a pair of strings");
    o.separators = {seps[0].as_string(), seps[1].as_string()};
  }
  o.sort_keys = truthy(p[3]);
  return str(dumps_json(v, o));
}

Value f_trim(Interpreter&, const Value& v, Args& a) {
  auto p = bind("trim", a, {{"chars", Value::none()}});
  std::optional<std::string> chars;
  if (!p[0].is_none()) chars = to_str(p[0]);
  return str(pystr::strip(to_str(v), chars));
}

Value f_truncate(Interpreter&, const Value& v, Args& a) {
  auto p = bind("truncate", a, {{"length", Value::integer(255)}, {"killwords", Value::boolean(false)},
                                {"end", str("...")}, {"leeway", Value::none()}});
  std::string s = to_str(v), end = to_str(p[2]);
  int64_t length = int_arg(p[0], "truncate"), leeway = p[3].is_none() ? 5 : int_arg(p[3], "truncate");
  int64_t end_len = static_cast<int64_t>(pystr::length(end));
  if (length < end_len) throw EvalError("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) throw EvalError("expected leeway >= 0, got " + std::to_string(leeway));
  if (static_cast<int64_t>(pystr::length(s)) <= length + leeway) return str(s);
  std::string head(utf8::slice_chars(s, 0, static_cast<size_t>(length - end_len)));
  if (truthy(p[1])) return str(head + end);
  return str(pystr::rsplit(head, std::string(" "), 1)[0] + end);
}

Value f_unique(Interpreter& in, const Value& v, Args& a) {
  auto p = bind("unique", a, {{"case_sensitive", Value::boolean(false)}, {"attribute", Value::none()}});
  auto parts = attribute_parts(p[1]);
  std::vector<Value> out, seen;
  for (const auto& item : iterate(v)) {
    Value k = get_path(in, item, parts);
    if (!truthy(p[0])) k = ignore_case(k);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(item);
    }
  }
  return Value::generator(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, Args& a) {
  bind("wordcount", a, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : utf8::to_u32(to_str(v))) {
    bool w = pystr::is_word_char(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::integer(n);
}

// ---- tests ----

bool t_defined(Interpreter&, const Value& v, Args&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, Args&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, Args&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, Args&) { return v.is_bool(); }
bool t_false(Interpreter&, const Value& v, Args&) { return v.is_bool() && !v.as_bool(); }
bool t_true(Interpreter&, const Value& v, Args&) { return v.is_bool() && v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, Args&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, Args&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, Args&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, Args&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, Args&) { return v.is_dict(); }
bool t_iterable(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict() || v.is(Value::Kind::Generator);
}
bool t_sequence(Interpreter&, const Value& v, Args&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, Args&) { return v.is(Value::Kind::Function) || v.is_undefined(); }
bool t_escaped(Interpreter&, const Value&, Args&) { return false; }
bool t_lower(Interpreter&, const Value& v, Args&) { return pystr::islower(to_str(v)); }
bool t_upper(Interpreter&, const Value& v, Args&) { return pystr::isupper(to_str(v)); }

const Value& one_arg(Args& a, const char* test) {
  if (a.positional.size() != 1 || !a.keyword.empty())
    throw EvalError(std::string("test '") + test + "' takes exactly one argument");
  return a.positional[0];
}

bool t_sameas(Interpreter&, const Value& v, Args& a) {
  const Value& o = one_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  if (v.identity()) return v.identity() == o.identity();
  return equals(v, o);
}
bool t_in(Interpreter&, const Value& v, Args& a) { return contains(one_arg(a, "in"), v); }
bool t_eq(Interpreter&, const Value& v, Args& a) { return equals(v, one_arg(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, Args& a) { return !equals(v, one_arg(a, "ne")); }
bool t_lt(Interpreter&, const Value& v, Args& a) { return less(v, one_arg(a, "lt")); }
bool t_gt(Interpreter&, const Value& v, Args& a) { return less(one_arg(a, "gt"), v); }
bool t_le(Interpreter&, const Value& v, Args& a) {
  const Value& o = one_arg(a, "le");
  return less(v, o) || (!less(o, v) && equals(v, o));
}
bool t_ge(Interpreter&, const Value& v, Args& a) {
  const Value& o = one_arg(a, "ge");
  return less(o, v) || (!less(v, o) && equals(v, o));
}
bool t_odd(Interpreter& in, const Value& v, Args& a) {
  bind("odd", a, {});
  return equals(arithmetic(BinOp::Mod, v, Value::integer(2), in), Value::integer(1));
}
bool t_even(Interpreter& in, const Value& v, Args& a) {
  bind("even", a, {});
  return equals(arithmetic(BinOp::Mod, v, Value::integer(2), in), Value::integer(0));
}
bool t_divisibleby(Interpreter& in, const Value& v, Args& a) {
  return equals(arithmetic(BinOp::Mod, v, one_arg(a, "divisibleby"), in), Value::integer(0));
}
bool t_filter(Interpreter&, const Value& v, Args&) { return v.is_string() && find_filter(v.as_string()); }
bool t_test(Interpreter&, const Value& v, Args&) { return v.is_string() && find_test(v.as_string()); }

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const std::map<std::string, FilterFn, std::less<>> table = {
      {"abs", f_abs},         {"attr", f_attr},           {"batch", f_batch},         {"capitalize", f_capitalize},
      {"center", f_center},   {"count", f_length},        {"d", f_default},           {"default", f_default},
      {"dictsort", f_dictsort}, {"e", f_escape},          {"escape", f_escape},       {"first", f_first},
      {"float", f_float},     {"forceescape", f_escape},  {"format", f_format},       {"groupby", f_groupby},
      {"indent", f_indent},   {"int", f_int},             {"items", f_items},         {"join", f_join},
      {"last", f_last},       {"length", f_length},       {"list", f_list},           {"lower", f_lower},
      {"map", f_map},         {"max", f_max},             {"min", f_min},             {"reject", f_reject},
      {"rejectattr", f_rejectattr}, {"replace", f_replace}, {"reverse", f_reverse},   {"round", f_round},
      {"safe", f_safe},       {"select", f_select},       {"selectattr", f_selectattr}, {"slice", f_slice},
      {"sort", f_sort},       {"string", f_string},       {"striptags", f_striptags}, {"sum", f_sum},
      {"title", f_title},     {"tojson", f_tojson},       {"trim", f_trim},           {"truncate", f_truncate},
      {"unique", f_unique},   {"upper", f_upper},         {"wordcount", f_wordcount},
  };
  return table;
}

const std::map<std::string, TestFn, std::less<>>& tests() {
  static const std::map<std::string, TestFn, std::less<>> table = {
      {"boolean", t_boolean},   {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
      {"==", t_eq},             {"eq", t_eq},             {"equalto", t_eq},      {"escaped", t_escaped},
      {"even", t_even},         {"false", t_false},       {"filter", t_filter},   {"float", t_float},
      {">=", t_ge},             {"ge", t_ge},             {">", t_gt},            {"gt", t_gt},
      {"greaterthan", t_gt},    {"in", t_in},             {"integer", t_integer}, {"iterable", t_iterable},
      {"<=", t_le},             {"le", t_le},             {"lower", t_lower},     {"<", t_lt},
      {"lt", t_lt},             {"lessthan", t_lt},       {"mapping", t_mapping}, {"!=", t_ne},
      {"ne", t_ne},             {"none", t_none},         {"number", t_number},   {"odd", t_odd},
      {"sameas", t_sameas},     {"sequence", t_sequence}, {"string", t_string},   {"test", t_test},
      {"true", t_true},         {"undefined", t_undefined}, {"upper", t_upper},
  };
  return table;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  auto it = filters().find(name);
  return it == filters().end() ? nullptr : it->second;
}

TestFn find_test(std::string_view name) {
  auto it = tests().find(name);
  return it == tests().end() ? nullptr : it->second;
}

bool unsupported_filter(std::string_view name) {
  static const char* kLeftOut[] = {"filesizeformat", "pprint", "random", "urlencode", "urlize", "wordwrap", "xmlattr"};
  return std::any_of(std::begin(kLeftOut), std::end(kLeftOut), [&](const char* n) { return name == n; });
}

}  // namespace kiln::tokenizers::jinja
