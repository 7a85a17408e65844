// Global functions (jinja2's range, dict, namespace, joiner; Hugging Face's
// raise_exception and strftime_now) and the methods of str, dict and list
// that chat templates call.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "kiln/tokenizers/jinja_args.h"
#include "kiln/tokenizers/jinja_builtins.h"
#include "kiln/tokenizers/jinja_interpreter.h"
#include "kiln/tokenizers/python_str.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

namespace {

// jinja2's sandbox refuses range() longer than this.
constexpr int64_t kMaxRange = 100000;

Value str(std::string s) { return Value::string(std::move(s)); }

std::optional<std::string> opt_str(const Value& v, const std::string& fn) {
  if (v.is_none()) return std::nullopt;
  if (!v.is_string()) throw EvalError(fn + " arg must be None or str, not " + type_name(v));
  return v.as_string();
}

const std::string& str_arg(const Value& v, const std::string& fn) {
  if (!v.is_string()) throw EvalError(fn + "() argument must be str, not " + type_name(v));
  return v.as_string();
}

std::optional<int64_t> opt_int(const Value& v, const std::string& fn) {
  if (v.is_none()) return std::nullopt;
  return int_arg(v, fn);
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  for (const auto& p : parts) out.push_back(str(p));
  return Value::list(std::move(out));
}

// dict(*args, **kwargs) / namespace(*args, **kwargs): a mapping or pairs, then keywords.
DictData dict_from(const CallArgs& a, const std::string& fn) {
  if (a.positional.size() > 1) throw EvalError(fn + " expected at most 1 argument, got " + std::to_string(a.positional.size()));
  DictData d;
  if (!a.positional.empty()) {
    const Value& src = a.positional[0];
    if (src.is_dict()) {
      d = src.as_dict();
    } else {
      for (const auto& pair : iterate(src)) {
        auto kv = iterate(pair);
        if (kv.size() != 2) throw EvalError(fn + ": sequence elements must have length 2");
        d.set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [k, v] : a.keyword) d.set(str(k), v);
  return d;
}

Value g_range(Interpreter& in, CallArgs& a) {
  if (!a.keyword.empty()) throw EvalError("range() takes no keyword arguments");
  if (a.positional.empty() || a.positional.size() > 3)
    throw EvalError("range expected 1 to 3 arguments, got " + std::to_string(a.positional.size()));
  int64_t start = 0, stop, step = 1;
  if (a.positional.size() == 1) {
    stop = int_arg(a.positional[0], "range");
  } else {
    start = int_arg(a.positional[0], "range");
    stop = int_arg(a.positional[1], "range");
    if (a.positional.size() == 3) step = int_arg(a.positional[2], "range");
  }
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  // Length computed in long double so that extreme bounds cannot overflow.
  long double span = step > 0 ? static_cast<long double>(stop) - start : static_cast<long double>(start) - stop;
  long double n = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
  if (n > kMaxRange)
    throw EvalError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (" + std::to_string(kMaxRange) + ").");
  std::vector<Value> out;
  // start + i * step stays within int64 by construction; unsigned arithmetic
  // keeps the intermediate product from overflowing.
  for (uint64_t i = 0; i < static_cast<uint64_t>(n); ++i)
    out.push_back(Value::integer(static_cast<int64_t>(static_cast<uint64_t>(start) + i * static_cast<uint64_t>(step))));
  in.check_size(out.size());
  return Value::list(std::move(out));
}

Value g_dict(Interpreter&, CallArgs& a) { return Value::dict(dict_from(a, "dict")); }

Value g_namespace(Interpreter& in, CallArgs& a) {
  auto ns = in.new_namespace();
  ns->attrs = dict_from(a, "namespace");
  return Value::ns(ns);
}

Value g_joiner(Interpreter&, CallArgs& a) {
  auto p = bind("joiner", a, {{"sep", str(", ")}});
  auto used = std::make_shared<bool>(false);
  Value sep = p[0];
  return Value::function("joiner", [used, sep](Interpreter&, CallArgs&) {
    if (!*used) {
      *used = true;
      return str("");
    }
    return sep;
  });
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  auto p = bind("raise_exception", a, {{"message", {}}});
  throw EvalError(to_str(p[0]), /*raised=*/true);
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  auto p = bind("strftime_now", a, {{"format", {}}});
  const std::string& fmt = str_arg(p[0], "strftime_now");
  std::time_t t = std::chrono::system_clock::to_time_t(in.now());
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string buf(256 + fmt.size() * 8, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return str(buf);
}

Value g_unsupported(Interpreter&, CallArgs&) { throw EvalError("this global function is not supported"); }

// ---- str.format ----

// Applies a format spec [[fill]align][sign][0][width][.precision][type] (the
// subset templates use) to one value.
std::string format_field(const Value& v, const std::string& spec) {
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = spec.substr(0, 1);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  char sign = 0;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    if (!align) fill = "0", align = '=';
    ++i;
  }
  size_t width = 0;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
    width = width * 10 + (spec[i++] - '0');
    check_built(static_cast<int64_t>(width), "format width");
  }
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
      precision = precision * 10 + (spec[i++] - '0');
      check_built(precision, "format precision");
    }
  }
  char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) throw EvalError("Invalid format specifier '" + spec + "'");
  std::string body;
  bool numeric = v.is_number();
  if (type == 0 || type == 's') {
    if (type == 's' && !v.is_string()) throw EvalError("Unknown format code 's' for object of type '" + type_name(v) + "'");
    if (v.is_float() && precision >= 0) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*g", precision, v.as_float());
      body = buf;
    } else {
      body = to_str(v);
      if (v.is_string() && precision >= 0) body = utf8::slice_chars(body, 0, static_cast<size_t>(precision));
    }
  } else if (std::string("dxXob").find(type) != std::string::npos) {
    if (!(v.is_int() || v.is_bool())) throw EvalError(std::string("Unknown format code '") + type + "' for object of type '" + type_name(v) + "'");
    int64_t n = v.as_int();
    unsigned long long mag = n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
    if (type == 'b') {
      do {
        body.insert(body.begin(), static_cast<char>('0' + (mag & 1)));
        mag >>= 1;
      } while (mag);
    } else {
      char buf[64];
      std::snprintf(buf, sizeof buf, type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%llu", mag);
      body = buf;
    }
    if (n < 0) body.insert(0, "-");
    else if (sign == '+' || sign == ' ') body.insert(0, 1, sign);
  } else if (std::string("fFeEgG%").find(type) != std::string::npos) {
    if (!numeric) throw EvalError(std::string("Unknown format code '") + type + "' for object of type '" + type_name(v) + "'");
    double x = v.as_float() * (type == '%' ? 100.0 : 1.0);
    char buf[512];
    std::string f = "%";
    if (sign == '+' || sign == ' ') f += sign;
    f += ".*";
    f += type == '%' ? 'f' : type;
    std::snprintf(buf, sizeof buf, f.c_str(), precision < 0 ? 6 : precision, x);
    body = buf;
    if (type == '%') body += '%';
  } else {
    throw EvalError(std::string("Unknown format code '") + type + "'");
  }
  size_t len = pystr::length(body);
  if (len >= width) return body;
  size_t pad = width - len;
  if (!align) align = numeric ? '>' : '<';
  std::string fills;
  for (size_t k = 0; k < pad; ++k) fills += fill;
  switch (align) {
    case '<': return body + fills;
    case '>': return fills + body;
    case '^': {
      std::string left, right;
      for (size_t k = 0; k < pad / 2; ++k) left += fill;
      for (size_t k = 0; k < pad - pad / 2; ++k) right += fill;
      return left + body + right;
    }
    default: {  // '=': padding after the sign
      size_t s = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
      return body.substr(0, s) + fills + body.substr(s);
    }
  }
}

std::string str_format(Interpreter& in, const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      throw EvalError("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) throw EvalError("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1), spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (size_t bang = field.find('!'); bang != std::string::npos) conv = field.substr(bang + 1), field.resize(bang);
    // The argument: "", a position, or a name, then .attr / [key] parts.
    size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= a.positional.size()) throw EvalError("Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      v = a.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t k = std::stoul(head);
      if (k >= a.positional.size()) throw EvalError("Replacement index " + head + " out of range for positional args tuple");
      v = a.positional[k];
    } else {
      auto it = std::find_if(a.keyword.begin(), a.keyword.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == a.keyword.end()) throw EvalError("'" + head + "'");
      v = it->second;
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        size_t next = field.find_first_of(".[", end + 1);
        v = in.getattr(v, field.substr(end + 1, next == std::string::npos ? std::string::npos : next - end - 1));
        end = next;
      } else {
        size_t rb = field.find(']', end);
        if (rb == std::string::npos) throw EvalError("Missing ']' in format string");
        std::string key = field.substr(end + 1, rb - end - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = in.getitem(v, digits ? Value::integer(std::stoll(key)) : str(key));
        end = rb + 1 < field.size() ? rb + 1 : std::string::npos;
      }
    }
    if (conv == "r" || conv == "a") v = str(to_repr(v));
    else if (conv == "s") v = str(to_str(v));
    else if (!conv.empty()) throw EvalError("Unknown conversion specifier " + conv);
    out += format_field(v, spec);
    in.check_size(out.size());
    i = close;
  }
  return out;
}

// ---- methods ----

using Method = Value (*)(Interpreter&, const Value& self, CallArgs& a);

Value bound(const Value& self, const std::string& name, Method m) {
  return Value::function(name, [self, m](Interpreter& in, CallArgs& a) { return m(in, self, a); });
}

Value unsafe(const Value& self, const std::string& name) {
  std::string message = "access to attribute '" + name + "' of '" + type_name(self) + "' object is unsafe.";
  return Value::function(name, [message](Interpreter&, CallArgs&) -> Value { throw EvalError(message); });
}

const std::string& self_str(const Value& self) { return self.as_string(); }

Value s_strip_impl(const Value& self, CallArgs& a, const char* fn, bool left, bool right) {
  auto p = bind(fn, a, {{"chars", Value::none()}});
  return str(pystr::strip(self_str(self), opt_str(p[0], fn), left, right));
}
Value s_strip(Interpreter&, const Value& s, CallArgs& a) { return s_strip_impl(s, a, "strip", true, true); }
Value s_lstrip(Interpreter&, const Value& s, CallArgs& a) { return s_strip_impl(s, a, "lstrip", true, false); }
Value s_rstrip(Interpreter&, const Value& s, CallArgs& a) { return s_strip_impl(s, a, "rstrip", false, true); }

Value s_split_impl(const Value& self, CallArgs& a, bool reverse) {
  const char* fn = reverse ? "rsplit" : "split";
  auto p = bind(fn, a, {{"sep", Value::none()}, {"maxsplit", Value::integer(-1)}});
  auto sep = opt_str(p[0], fn);
  if (sep && sep->empty()) throw EvalError("empty separator");
  int64_t max = int_arg(p[1], fn);
  return string_list(reverse ? pystr::rsplit(self_str(self), sep, max) : pystr::split(self_str(self), sep, max));
}
Value s_split(Interpreter&, const Value& s, CallArgs& a) { return s_split_impl(s, a, false); }
Value s_rsplit(Interpreter&, const Value& s, CallArgs& a) { return s_split_impl(s, a, true); }

Value s_splitlines(Interpreter&, const Value& s, CallArgs& a) {
  auto p = bind("splitlines", a, {{"keepends", Value::boolean(false)}});
  return string_list(pystr::splitlines(self_str(s), truthy(p[0])));
}

Value s_affix_impl(const Value& self, CallArgs& a, bool suffix) {
  const char* fn = suffix ? "endswith" : "startswith";
  auto p = bind(fn, a, {{"prefix", {}}, {"start", Value::none()}, {"end", Value::none()}});
  std::u32string u = utf8::to_u32(self_str(self));
  auto n = static_cast<int64_t>(u.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  int64_t b = p[1].is_none() ? 0 : clamp(int_arg(p[1], fn)), e = p[2].is_none() ? n : clamp(int_arg(p[2], fn));
  std::vector<Value> candidates;
  if (p[0].is_list() && p[0].as_list().tuple) candidates = p[0].as_list().items;
  else if (p[0].is_string()) candidates.push_back(p[0]);
  else throw EvalError(std::string(fn) + " first arg must be str or a tuple of str, not " + type_name(p[0]));
  for (const auto& c : candidates) {
    std::u32string x = utf8::to_u32(str_arg(c, fn));
    auto m = static_cast<int64_t>(x.size());
    if (e - b < m) {
      if (b > n) continue;
      if (m == 0 && b <= e) return Value::boolean(true);
      continue;
    }
    int64_t at = suffix ? e - m : b;
    if (u.compare(static_cast<size_t>(at), static_cast<size_t>(m), x) == 0) return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value s_startswith(Interpreter&, const Value& s, CallArgs& a) { return s_affix_impl(s, a, false); }
Value s_endswith(Interpreter&, const Value& s, CallArgs& a) { return s_affix_impl(s, a, true); }

Value s_replace(Interpreter& in, const Value& s, CallArgs& a) {
  auto p = bind("replace", a, {{"old", {}}, {"new", {}}, {"count", Value::integer(-1)}});
  std::string out = pystr::replace(self_str(s), str_arg(p[0], "replace"), str_arg(p[1], "replace"), int_arg(p[2], "replace"));
  in.check_size(out.size());
  return str(std::move(out));
}

#define KILN_STR_METHOD0(NAME, EXPR)                           \
  Value s_##NAME(Interpreter&, const Value& self, CallArgs& a) { \
    bind(#NAME, a, {});                                          \
    const std::string& s = self_str(self);                       \
    return EXPR;                                                 \
  }
KILN_STR_METHOD0(upper, str(pystr::upper(s)))
KILN_STR_METHOD0(lower, str(pystr::lower(s)))
KILN_STR_METHOD0(casefold, str(pystr::lower(s)))
KILN_STR_METHOD0(title, str(pystr::title(s)))
KILN_STR_METHOD0(capitalize, str(pystr::capitalize(s)))
KILN_STR_METHOD0(swapcase, str(pystr::swapcase(s)))
KILN_STR_METHOD0(isdigit, Value::boolean(pystr::isdigit(s)))
KILN_STR_METHOD0(isalpha, Value::boolean(pystr::isalpha(s)))
KILN_STR_METHOD0(isalnum, Value::boolean(pystr::isalnum(s)))
KILN_STR_METHOD0(isspace, Value::boolean(pystr::isspace(s)))
KILN_STR_METHOD0(islower, Value::boolean(pystr::islower(s)))
KILN_STR_METHOD0(isupper, Value::boolean(pystr::isupper(s)))
KILN_STR_METHOD0(istitle, Value::boolean(pystr::istitle(s)))
KILN_STR_METHOD0(isnumeric, Value::boolean(pystr::isnumeric(s)))
KILN_STR_METHOD0(isdecimal, Value::boolean(pystr::isdecimal(s)))
#undef KILN_STR_METHOD0

Value s_find_impl(const Value& self, CallArgs& a, const char* fn, bool reverse, bool raise) {
  auto p = bind(fn, a, {{"sub", {}}, {"start", Value::none()}, {"end", Value::none()}});
  int64_t at = pystr::find(self_str(self), str_arg(p[0], fn), opt_int(p[1], fn), opt_int(p[2], fn), reverse);
  if (at < 0 && raise) throw EvalError("substring not found");
  return Value::integer(at);
}
Value s_find(Interpreter&, const Value& s, CallArgs& a) { return s_find_impl(s, a, "find", false, false); }
Value s_rfind(Interpreter&, const Value& s, CallArgs& a) { return s_find_impl(s, a, "rfind", true, false); }
Value s_index(Interpreter&, const Value& s, CallArgs& a) { return s_find_impl(s, a, "index", false, true); }
Value s_rindex(Interpreter&, const Value& s, CallArgs& a) { return s_find_impl(s, a, "rindex", true, true); }

Value s_count(Interpreter&, const Value& s, CallArgs& a) {
  auto p = bind("count", a, {{"sub", {}}});
  return Value::integer(pystr::count(self_str(s), str_arg(p[0], "count")));
}

Value s_join(Interpreter& in, const Value& s, CallArgs& a) {
  auto p = bind("join", a, {{"iterable", {}}});
  std::string out;
  size_t i = 0;
  for (const auto& item : iterate(p[0])) {
    if (!item.is_string())
      throw EvalError("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(item) + " found");
    if (i++) out += self_str(s);
    out += item.as_string();
    in.check_size(out.size());
  }
  return str(std::move(out));
}

Value s_format(Interpreter& in, const Value& s, CallArgs& a) { return str(str_format(in, self_str(s), a)); }

Value s_removeprefix(Interpreter&, const Value& s, CallArgs& a) {
  auto p = bind("removeprefix", a, {{"prefix", {}}});
  const std::string& x = str_arg(p[0], "removeprefix");
  const std::string& t = self_str(s);
  return str(t.compare(0, x.size(), x) == 0 ? t.substr(x.size()) : t);
}

Value s_removesuffix(Interpreter&, const Value& s, CallArgs& a) {
  auto p = bind("removesuffix", a, {{"suffix", {}}});
  const std::string& x = str_arg(p[0], "removesuffix");
  const std::string& t = self_str(s);
  bool ends = !x.empty() && t.size() >= x.size() && t.compare(t.size() - x.size(), x.size(), x) == 0;
  return str(ends ? t.substr(0, t.size() - x.size()) : t);
}

Value s_partition_impl(const Value& self, CallArgs& a, bool reverse) {
  const char* fn = reverse ? "rpartition" : "partition";
  auto p = bind(fn, a, {{"sep", {}}});
  const std::string& sep = str_arg(p[0], fn);
  if (sep.empty()) throw EvalError("empty separator");
  const std::string& t = self_str(self);
  size_t at = reverse ? t.rfind(sep) : t.find(sep);
  if (at == std::string::npos)
    return reverse ? Value::list({str(""), str(""), str(t)}, true) : Value::list({str(t), str(""), str("")}, true);
  return Value::list({str(t.substr(0, at)), str(sep), str(t.substr(at + sep.size()))}, true);
}
Value s_partition(Interpreter&, const Value& s, CallArgs& a) { return s_partition_impl(s, a, false); }
Value s_rpartition(Interpreter&, const Value& s, CallArgs& a) { return s_partition_impl(s, a, true); }

Value s_pad_impl(Interpreter& in, const Value& self, CallArgs& a, char how) {
  const char* fn = how == 'l' ? "ljust" : how == 'r' ? "rjust" : "center";
  auto p = bind(fn, a, {{"width", {}}, {"fillchar", str(" ")}});
  const std::string& t = self_str(self);
  const std::string& fill = str_arg(p[1], fn);
  if (pystr::length(fill) != 1) throw EvalError("The fill character must be exactly one character long");
  int64_t width = int_arg(p[0], fn), n = static_cast<int64_t>(pystr::length(t));
  if (width <= n) return str(t);
  in.check_size(static_cast<size_t>(width) * fill.size());
  int64_t marg = width - n, left = how == 'l' ? 0 : how == 'r' ? marg : marg / 2 + (marg & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += t;
  for (int64_t i = left; i < marg; ++i) out += fill;
  return str(out);
}
Value s_ljust(Interpreter& in, const Value& s, CallArgs& a) { return s_pad_impl(in, s, a, 'l'); }
Value s_rjust(Interpreter& in, const Value& s, CallArgs& a) { return s_pad_impl(in, s, a, 'r'); }
Value s_center(Interpreter& in, const Value& s, CallArgs& a) { return s_pad_impl(in, s, a, 'c'); }

Value s_zfill(Interpreter& in, const Value& s, CallArgs& a) {
  auto p = bind("zfill", a, {{"width", {}}});
  std::string t = self_str(s);
  int64_t width = int_arg(p[0], "zfill"), n = static_cast<int64_t>(pystr::length(t));
  if (width <= n) return str(t);
  in.check_size(static_cast<size_t>(width));
  size_t sign = !t.empty() && (t[0] == '+' || t[0] == '-') ? 1 : 0;
  t.insert(sign, static_cast<size_t>(width - n), '0');
  return str(t);
}

Value d_items(Interpreter&, const Value& d, CallArgs& a) {
  bind("items", a, {});
  std::vector<Value> out;
  for (const auto& [k, v] : d.as_dict().items) out.push_back(Value::list({k, v}, true));
  return Value::list(std::move(out));
}

Value d_keys(Interpreter&, const Value& d, CallArgs& a) {
  bind("keys", a, {});
  return Value::list(iterate(d));
}

Value d_values(Interpreter&, const Value& d, CallArgs& a) {
  bind("values", a, {});
  std::vector<Value> out;
  for (const auto& kv : d.as_dict().items) out.push_back(kv.second);
  return Value::list(std::move(out));
}

Value d_get(Interpreter&, const Value& d, CallArgs& a) {
  auto p = bind("get", a, {{"key", {}}, {"default", Value::none()}});
  const Value* v = d.as_dict().find(p[0]);
  return v ? *v : p[1];
}

Value same(Interpreter&, const Value& self, CallArgs& a) {
  bind("copy", a, {});
  return self;
}

Value l_index(Interpreter&, const Value& l, CallArgs& a) {
  auto p = bind("index", a, {{"value", {}}});
  const auto& items = l.as_list().items;
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], p[0])) return Value::integer(static_cast<int64_t>(i));
  throw EvalError(to_repr(p[0]) + " is not in list");
}

Value l_count(Interpreter&, const Value& l, CallArgs& a) {
  auto p = bind("count", a, {{"value", {}}});
  const auto& items = l.as_list().items;
  return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& x) { return equals(x, p[0]); }));
}

template <typename Table>
std::optional<Value> lookup_method(const Table& table, const Value& self, const std::string& name) {
  for (const auto& [n, m] : table)
    if (name == n) return bound(self, name, m);
  return std::nullopt;
}

}  // namespace

Value find_global(std::string_view name) {
  static const std::pair<const char*, Value (*)(Interpreter&, CallArgs&)> kGlobals[] = {
      {"range", g_range},           {"dict", g_dict},
      {"namespace", g_namespace},   {"joiner", g_joiner},
      {"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now},
      {"cycler", g_unsupported},    {"lipsum", g_unsupported},
  };
  for (const auto& [n, fn] : kGlobals)
    if (name == n) return Value::function(n, fn);
  return Value::undefined("");
}

std::optional<Value> find_method(const Value& obj, const std::string& name) {
  static const std::pair<const char*, Method> kStr[] = {
      {"strip", s_strip},           {"lstrip", s_lstrip},         {"rstrip", s_rstrip},
      {"split", s_split},           {"rsplit", s_rsplit},         {"splitlines", s_splitlines},
      {"startswith", s_startswith}, {"endswith", s_endswith},     {"replace", s_replace},
      {"upper", s_upper},           {"lower", s_lower},           {"casefold", s_casefold},
      {"title", s_title},           {"capitalize", s_capitalize}, {"swapcase", s_swapcase},
      {"isdigit", s_isdigit},       {"isalpha", s_isalpha},       {"isalnum", s_isalnum},
      {"isspace", s_isspace},       {"islower", s_islower},       {"isupper", s_isupper},
      {"istitle", s_istitle},       {"isnumeric", s_isnumeric},   {"isdecimal", s_isdecimal},
      {"find", s_find},             {"rfind", s_rfind},           {"index", s_index},
      {"rindex", s_rindex},         {"count", s_count},           {"join", s_join},
      {"format", s_format},         {"removeprefix", s_removeprefix}, {"removesuffix", s_removesuffix},
      {"partition", s_partition},   {"rpartition", s_rpartition}, {"ljust", s_ljust},
      {"rjust", s_rjust},           {"center", s_center},         {"zfill", s_zfill},
  };
  static const std::pair<const char*, Method> kDict[] = {
      {"items", d_items}, {"keys", d_keys}, {"values", d_values}, {"get", d_get}, {"copy", same}};
  static const std::pair<const char*, Method> kList[] = {{"index", l_index}, {"count", l_count}, {"copy", same}};
  static const char* kDictMutators[] = {"pop", "popitem", "setdefault", "update", "clear"};
  static const char* kListMutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
  if (obj.is_string()) return lookup_method(kStr, obj, name);
  if (obj.is_dict()) {
    for (const char* m : kDictMutators)
      if (name == m) return unsafe(obj, name);
    return lookup_method(kDict, obj, name);
  }
  if (obj.is_list()) {
    bool tuple = obj.as_list().tuple;
    if (!tuple)
      for (const char* m : kListMutators)
        if (name == m) return unsafe(obj, name);
    if (tuple && name == "copy") return std::nullopt;
    return lookup_method(kList, obj, name);
  }
  return std::nullopt;
}

}  // namespace kiln::tokenizers::jinja
