#include "kiln/tokenizers/python_str.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::pystr {

namespace {

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

icu::UnicodeString to_icu(std::string_view s) {
  return icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
}

std::string from_icu(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string title_char(char32_t c) {
  if (c < 0x80) return std::string(1, static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c));
  icu::UnicodeString u(static_cast<UChar32>(c));
  u.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  return from_icu(u);
}

std::string lower_char(char32_t c) {
  if (c < 0x80) return std::string(1, static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
  return lower(utf8::encode(c));
}

std::string upper_char(char32_t c) {
  if (c < 0x80) return std::string(1, static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c));
  return upper(utf8::encode(c));
}

bool cased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }
bool lowercase(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_LOWERCASE); }
bool uppercase(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_UPPERCASE); }
bool titlecase(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_TITLECASE_LETTER; }

bool alpha(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER: case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

int numeric_type(char32_t c) { return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE); }
bool decimal(char32_t c) { return numeric_type(c) == U_NT_DECIMAL; }
bool digit(char32_t c) { int t = numeric_type(c); return t == U_NT_DECIMAL || t == U_NT_DIGIT; }
bool numeric(char32_t c) { return numeric_type(c) != U_NT_NONE; }

bool printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x7f) return c >= 0x20;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED: case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

template <typename Pred>
bool all_chars(std::string_view s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : utf8::to_u32(s))
    if (!pred(c)) return false;
  return true;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20);
  return c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return alpha(c) || numeric(c);
}

size_t length(std::string_view s) { return utf8::count_chars(s); }

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string set;
  if (chars) set = utf8::to_u32(*chars);
  auto strippable = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : is_space(c); };
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end) {
      size_t n;
      char32_t c = utf8::decode(s, begin, &n);
      if (!strippable(c)) break;
      begin += n;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t n;
      char32_t c = utf8::decode(s, start, &n);
      if (!strippable(c)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t left = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (sep) {
    size_t pos = 0;
    while (left-- > 0) {
      size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  std::u32string u = utf8::to_u32(s);
  size_t i = 0, n = u.size();
  while (left-- > 0) {
    while (i < n && is_space(u[i])) ++i;
    if (i == n) break;
    size_t j = i++;
    while (i < n && !is_space(u[i])) ++i;
    out.push_back(utf8::from_u32(std::u32string_view(u).substr(j, i - j)));
  }
  if (i < n) {
    while (i < n && is_space(u[i])) ++i;
    if (i != n) out.push_back(utf8::from_u32(std::u32string_view(u).substr(i)));
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  int64_t left = maxsplit < 0 ? INT64_MAX : maxsplit;
  if (sep) {
    size_t end = s.size();
    while (left-- > 0) {
      if (end < sep->size()) break;
      size_t at = s.rfind(*sep, end - sep->size());
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    out.emplace_back(s.substr(0, end));
    std::reverse(out.begin(), out.end());
    return out;
  }
  std::u32string u = utf8::to_u32(s);
  int64_t i = static_cast<int64_t>(u.size()) - 1;
  while (left-- > 0) {
    while (i >= 0 && is_space(u[i])) --i;
    if (i < 0) break;
    int64_t j = i--;
    while (i >= 0 && !is_space(u[i])) --i;
    out.push_back(utf8::from_u32(std::u32string_view(u).substr(i + 1, j - i)));
  }
  if (i >= 0) {
    while (i >= 0 && is_space(u[i])) --i;
    if (i >= 0) out.push_back(utf8::from_u32(std::u32string_view(u).substr(0, i + 1)));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string u = utf8::to_u32(s);
  size_t i = 0, n = u.size();
  while (i < n) {
    size_t j = i;
    while (i < n && !is_line_break(u[i])) ++i;
    size_t eol = i;
    if (i < n) {
      if (u[i] == '\r' && i + 1 < n && u[i + 1] == '\n') i += 2;
      else ++i;
      if (keepends) eol = i;
    }
    out.push_back(utf8::from_u32(std::u32string_view(u).substr(j, eol - j)));
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  int64_t left = count < 0 ? INT64_MAX : count;
  if (old.empty()) {
    size_t i = 0;
    while (i <= s.size()) {
      if (left-- > 0) out += repl;
      else {
        out += s.substr(i);
        break;
      }
      if (i == s.size()) break;
      size_t n = utf8::seq_len(static_cast<unsigned char>(s[i]));
      out += s.substr(i, n);
      i += n;
    }
    return out;
  }
  size_t pos = 0;
  while (left-- > 0) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out += s.substr(pos, at - pos);
    out += repl;
    pos = at + old.size();
  }
  out += s.substr(pos);
  return out;
}

int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end,
             bool reverse) {
  std::u32string u = utf8::to_u32(s), v = utf8::to_u32(sub);
  int64_t n = static_cast<int64_t>(u.size());
  auto clamp = [n](int64_t i) { return i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n); };
  int64_t b = start ? clamp(*start) : 0, e = end ? clamp(*end) : n;
  int64_t m = static_cast<int64_t>(v.size());
  if (e - b < m) return -1;
  if (!reverse) {
    for (int64_t i = b; i + m <= e; ++i)
      if (u.compare(i, m, v) == 0) return i;
  } else {
    for (int64_t i = e - m; i >= b; --i)
      if (u.compare(i, m, v) == 0) return i;
  }
  return -1;
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string_view::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string upper(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'a' && c <= 'z') c -= 32;
    return out;
  }
  icu::UnicodeString u = to_icu(s);
  u.toUpper(icu::Locale::getRoot());
  return from_icu(u);
}

std::string lower(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c += 32;
    return out;
  }
  icu::UnicodeString u = to_icu(s);
  u.toLower(icu::Locale::getRoot());
  return from_icu(u);
}

// CPython's do_title: a cased character after a cased one is lowered, any
// other is titlecased; "cased" is judged on the original character.
std::string title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : utf8::to_u32(s)) {
    out += previous_cased ? lower_char(c) : title_char(c);
    previous_cased = c < 0x80 ? ((c | 32) >= 'a' && (c | 32) <= 'z') : cased(c);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  if (s.empty()) return "";
  size_t n;
  char32_t first = utf8::decode(s, 0, &n);
  return title_char(first) + lower(s.substr(n));
}

std::string swapcase(std::string_view s) {
  std::string out;
  for (char32_t c : utf8::to_u32(s)) {
    if (uppercase(c)) out += lower_char(c);
    else if (lowercase(c)) out += upper_char(c);
    else utf8::append(out, c);
  }
  return out;
}

bool islower(std::string_view s) {
  bool any = false;
  for (char32_t c : utf8::to_u32(s)) {
    if (uppercase(c) || titlecase(c)) return false;
    if (lowercase(c)) any = true;
  }
  return any;
}

bool isupper(std::string_view s) {
  bool any = false;
  for (char32_t c : utf8::to_u32(s)) {
    if (lowercase(c) || titlecase(c)) return false;
    if (uppercase(c)) any = true;
  }
  return any;
}

bool istitle(std::string_view s) {
  bool any = false, previous_cased = false;
  for (char32_t c : utf8::to_u32(s)) {
    if (uppercase(c) || titlecase(c)) {
      if (previous_cased) return false;
      previous_cased = any = true;
    } else if (lowercase(c)) {
      if (!previous_cased) return false;
      previous_cased = any = true;
    } else {
      previous_cased = false;
    }
  }
  return any;
}

bool isalpha(std::string_view s) { return all_chars(s, alpha); }
bool isdigit(std::string_view s) { return all_chars(s, digit); }
bool isdecimal(std::string_view s) { return all_chars(s, decimal); }
bool isnumeric(std::string_view s) { return all_chars(s, numeric); }
bool isalnum(std::string_view s) { return all_chars(s, [](char32_t c) { return alpha(c) || numeric(c); }); }
bool isspace(std::string_view s) { return all_chars(s, is_space); }

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos, has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  char buf[16];
  for (char32_t c : utf8::to_u32(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (printable(c)) {
      utf8::append(out, c);
    } else {
      if (c <= 0xff) std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      else if (c <= 0xffff) std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    }
  }
  out += quote;
  return out;
}

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // [-]d[.ddd]e(+|-)XX, shortest round-trip digits
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, 1) + (e > 1 ? sci.substr(2, e - 2) : "");
  int exp10 = std::stoi(sci.substr(e + 1));
  int decpt = exp10 + 1;  // digits[0:decpt] . digits[decpt:]
  int nd = static_cast<int>(digits.size());
  std::string out;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) out = "0." + std::string(-decpt, '0') + digits;
    else if (decpt >= nd) out = digits + std::string(decpt - nd, '0') + ".0";
    else out = digits.substr(0, decpt) + "." + digits.substr(decpt);
  } else {
    out = digits.substr(0, 1);
    if (nd > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += ebuf;
  }
  return sign + out;
}

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   int64_t step) {
  int64_t b, e;
  if (!start) {
    b = step < 0 ? n - 1 : 0;
  } else {
    b = *start;
    if (b < 0) {
      b += n;
      if (b < 0) b = step < 0 ? -1 : 0;
    } else if (b >= n) {
      b = step < 0 ? n - 1 : n;
    }
  }
  if (!stop) {
    e = step < 0 ? -1 : n;
  } else {
    e = *stop;
    if (e < 0) {
      e += n;
      if (e < 0) e = step < 0 ? -1 : 0;
    } else if (e >= n) {
      e = step < 0 ? n - 1 : n;
    }
  }
  std::vector<int64_t> out;
  if (step > 0)
    for (int64_t i = b; i < e; i += step) out.push_back(i);
  else
    for (int64_t i = b; i > e; i += step) out.push_back(i);
  return out;
}

}  // namespace kiln::tokenizers::pystr
