// Python's arithmetic operators and printf-style `%` formatting, as jinja2
// evaluates `a + b`, `x // 2`, `"%s" % name` through Python.
#include <cctype>
#include <cmath>
#include <cstdio>

#include "kiln/tokenizers/jinja_interpreter.h"
#include "kiln/tokenizers/python_str.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

namespace {

const char* symbol(BinOp op) {
  switch (op) {
    case BinOp::Add: return "+";
    case BinOp::Sub: return "-";
    case BinOp::Mul: return "*";
    case BinOp::Div: return "/";
    case BinOp::FloorDiv: return "//";
    case BinOp::Mod: return "%";
    case BinOp::Pow: return "**";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw EvalError(a.undefined_message());
  if (b.is_undefined()) throw EvalError(b.undefined_message());
  if (op == BinOp::Add && (a.is_string() || a.is_list()))
    throw EvalError("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
  throw EvalError(std::string("unsupported operand type(s) for ") + symbol(op) + ": '" + type_name(a) + "' and '" +
                  type_name(b) + "'");
}

[[noreturn]] void overflow() { throw EvalError("integer overflow (integers are 64-bit here)"); }

bool both_int(const Value& a, const Value& b) { return !a.is_float() && !b.is_float(); }

Value repeat(const Value& seq, int64_t n, const Interpreter& in) {
  if (n <= 0) return seq.is_string() ? Value::string("") : Value::list({}, seq.as_list().tuple);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    in.check_size(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return Value::string(std::move(out));
  }
  const ListData& l = seq.as_list();
  in.check_size(l.items.size() * static_cast<size_t>(n) * sizeof(Value));
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), l.items.begin(), l.items.end());
  return Value::list(std::move(out), l.tuple);
}

double float_floordiv(double x, double y) {
  double mod = std::fmod(x, y), div = (x - mod) / y;
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) div -= 1.0;
  }
  if (div == 0) return std::copysign(0.0, x / y);
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return fl;
}

double float_mod(double x, double y) {
  double mod = std::fmod(x, y);
  if (mod != 0) {
    if ((y < 0) != (mod < 0)) mod += y;
  } else {
    mod = std::copysign(0.0, y);
  }
  return mod;
}

int64_t int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1)
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    exp >>= 1;
    if (exp && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return result;
}

}  // namespace

Value arithmetic(BinOp op, const Value& a, const Value& b, const Interpreter& in) {
  const bool numbers = a.is_number() && b.is_number();
  switch (op) {
    case BinOp::Add:
      if (numbers) {
        if (!both_int(a, b)) return Value::number(a.as_float() + b.as_float());
        int64_t r;
        if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      if (a.is_string() && b.is_string()) {
        in.check_size(a.as_string().size() + b.as_string().size());
        return Value::string(a.as_string() + b.as_string());
      }
      if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
        in.check_size((a.as_list().items.size() + b.as_list().items.size()) * sizeof(Value));
        std::vector<Value> items = a.as_list().items;
        items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
        return Value::list(std::move(items), a.as_list().tuple);
      }
      break;
    case BinOp::Sub:
      if (numbers) {
        if (!both_int(a, b)) return Value::number(a.as_float() - b.as_float());
        int64_t r;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      break;
    case BinOp::Mul:
      if (numbers) {
        if (!both_int(a, b)) return Value::number(a.as_float() * b.as_float());
        int64_t r;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value::integer(r);
      }
      if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int(), in);
      if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int(), in);
      break;
    case BinOp::Div:
      if (numbers) {
        if (b.as_float() == 0) throw EvalError("division by zero");
        return Value::number(a.as_float() / b.as_float());
      }
      break;
    case BinOp::FloorDiv:
      if (numbers) {
        if (!both_int(a, b)) {
          if (b.as_float() == 0) throw EvalError("float floor division by zero");
          return Value::number(float_floordiv(a.as_float(), b.as_float()));
        }
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) throw EvalError("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) overflow();
        int64_t q = x / y;
        if (x % y != 0 && ((x < 0) != (y < 0))) --q;
        return Value::integer(q);
      }
      break;
    case BinOp::Mod:
      if (a.is_string()) return Value::string(percent_format(a.as_string(), b));
      if (numbers) {
        if (!both_int(a, b)) {
          if (b.as_float() == 0) throw EvalError("float modulo");
          return Value::number(float_mod(a.as_float(), b.as_float()));
        }
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) throw EvalError("integer division or modulo by zero");
        if (y == -1) return Value::integer(0);
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) r += y;
        return Value::integer(r);
      }
      break;
    case BinOp::Pow:
      if (numbers) {
        if (both_int(a, b) && b.as_int() >= 0) return Value::integer(int_pow(a.as_int(), b.as_int()));
        double x = a.as_float(), y = b.as_float();
        if (x == 0 && y < 0) throw EvalError("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) throw EvalError("a negative number raised to a fractional power is complex");
        return Value::number(std::pow(x, y));
      }
      break;
  }
  unsupported(op, a, b);
}

// printf-style formatting: %[(key)][flags][width][.precision]type with types
// s r a d i u f F e E g G x X o c and %%.
std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> values;
  const Value* mapping = nullptr;
  if (args.is_list() && args.as_list().tuple) values = args.as_list().items;
  else if (args.is_dict()) mapping = &args;
  else values.push_back(args);
  size_t next = 0;
  auto take = [&]() -> Value {
    if (next >= values.size()) throw EvalError("not enough arguments for format string");
    return values[next++];
  };
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw EvalError("incomplete format");
    Value keyed;
    bool has_key = false;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) throw EvalError("incomplete format key");
      if (!mapping) throw EvalError("format requires a mapping");
      const Value* v = mapping->as_dict().find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!v) throw EvalError("'" + format.substr(i + 1, close - i - 1) + "'");
      keyed = *v;
      has_key = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string("-+ 0#").find(format[i]) != std::string::npos) flags += format[i++];
    int width = 0;
    while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
      width = width * 10 + (format[i++] - '0');
      check_built(width, "format width");
    }
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      precision = 0;
      ++i;
      while (i < format.size() && std::isdigit(static_cast<unsigned char>(format[i]))) {
        precision = precision * 10 + (format[i++] - '0');
        check_built(precision, "format precision");
      }
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) throw EvalError("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    Value v = has_key ? keyed : take();
    std::string body;
    bool numeric = false;
    switch (type) {
      case 's': body = to_str(v); break;
      case 'r': case 'a': body = to_repr(v); break;
      case 'c':
        if (v.is_string() && pystr::length(v.as_string()) == 1) body = v.as_string();
        else if (v.is_int()) body = utf8::encode(static_cast<char32_t>(v.as_int()));
        else throw EvalError("%c requires int or char");
        break;
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        if (!v.is_number()) throw EvalError(std::string("%") + type + " format: a real number is required, not " + type_name(v));
        int64_t n = v.is_float() ? static_cast<int64_t>(std::trunc(v.as_float())) : v.as_int();
        char buf[64];
        const char* fmt = type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%llu";
        unsigned long long mag = n < 0 ? 0ULL - static_cast<unsigned long long>(n) : static_cast<unsigned long long>(n);
        std::snprintf(buf, sizeof buf, fmt, mag);
        body = buf;
        if (precision >= 0 && static_cast<int>(body.size()) < precision) body.insert(0, precision - body.size(), '0');
        if (flags.find('#') != std::string::npos && type != 'd' && type != 'i' && type != 'u')
          body.insert(0, type == 'o' ? "0o" : type == 'x' ? "0x" : "0X");
        if (n < 0) body.insert(0, "-");
        else if (flags.find('+') != std::string::npos) body.insert(0, "+");
        else if (flags.find(' ') != std::string::npos) body.insert(0, " ");
        numeric = true;
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        if (!v.is_number()) throw EvalError(std::string("must be real number, not ") + type_name(v));
        std::string spec = "%";
        if (flags.find('+') != std::string::npos) spec += '+';
        else if (flags.find(' ') != std::string::npos) spec += ' ';
        if (flags.find('#') != std::string::npos) spec += '#';
        spec += ".*";
        spec += type;
        char buf[512];
        std::snprintf(buf, sizeof buf, spec.c_str(), precision < 0 ? 6 : precision, v.as_float());
        body = buf;
        numeric = true;
        break;
      }
      default:
        throw EvalError(std::string("unsupported format character '") + type + "'");
    }
    if (precision >= 0 && (type == 's' || type == 'r' || type == 'a')) body = utf8::slice_chars(body, 0, precision);
    int len = static_cast<int>(pystr::length(body));
    if (len < width) {
      size_t pad = static_cast<size_t>(width - len);
      if (flags.find('-') != std::string::npos) body.append(pad, ' ');
      else if (numeric && flags.find('0') != std::string::npos) {
        size_t sign = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
        body.insert(sign, pad, '0');
      } else body.insert(0, pad, ' ');
    }
    out += body;
  }
  if (!mapping && next < values.size()) throw EvalError("not all arguments converted during string formatting");
  return out;
}

}  // namespace kiln::tokenizers::jinja
