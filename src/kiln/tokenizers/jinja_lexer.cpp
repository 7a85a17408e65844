#include "kiln/tokenizers/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kiln/core/error.h"
#include "kiln/tokenizers/python_str.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers::jinja {

std::string Source::where(size_t offset) const {
  offset = std::min(offset, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  size_t col = 1 + utf8::count_chars(std::string_view(text).substr(line_start, offset - line_start));
  return name + ":" + std::to_string(line) + ":" + std::to_string(col);
}

void Source::fail(size_t offset, const std::string& message) const { throw Error(where(offset) + ": " + message); }

std::string normalize_newlines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      out += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      out += text[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

namespace {

class Lexer {
 public:
  explicit Lexer(const Source& source) : src_(source), s_(source.text) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) root();
    push(Tok::Eof, "", s_.size());
    return std::move(out_);
  }

 private:
  const Source& src_;
  const std::string& s_;
  size_t pos_ = 0;
  // Whether the text consumed last ended with a newline: lstrip_blocks then
  // also strips a tag's indentation when no newline precedes it in the data.
  bool line_starting_ = true;
  std::vector<Token> out_;

  void push(Tok type, std::string text, size_t offset) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.offset = offset;
    out_.push_back(std::move(t));
  }

  bool at(size_t p, const char* lit) const { return s_.compare(p, std::strlen(lit), lit) == 0; }

  // Python's \s at p: the byte length of the whitespace code point there, or 0.
  size_t space_at(size_t p) const {
    if (p >= s_.size()) return 0;
    size_t n;
    char32_t c = utf8::decode(s_, p, &n);
    return pystr::is_space(c) ? n : 0;
  }
  size_t skip_spaces(size_t p) const {
    while (size_t n = space_at(p)) p += n;
    return p;
  }

  // The data before a tag, after the tag's whitespace control: "-" strips all
  // whitespace before it; otherwise (no "+", a block or comment tag) a line
  // holding only whitespace before the tag loses that whitespace.
  void emit_data(std::string text, char sign, bool lstrip, size_t offset) {
    if (sign == '-') {
      text = pystr::strip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip) {
      size_t nl = text.rfind('\n');
      size_t l = nl == std::string::npos ? 0 : nl + 1;
      if ((l > 0 || line_starting_) && l < text.size()) {
        bool blank = true;
        for (size_t i = l; i < text.size() && blank;) {
          size_t n;
          blank = pystr::is_space(utf8::decode(text, i, &n));
          i += n;
        }
        if (blank) text.resize(l);
      }
    }
    if (!text.empty()) push(Tok::Data, std::move(text), offset);
  }

  // End of a `{% raw %}` opener starting at `p` (after "{%" and its sign), or npos.
  size_t raw_opener_end(size_t p) const {
    p = skip_spaces(p);
    if (!at(p, "raw")) return std::string::npos;
    p = skip_spaces(p + 3);
    if (at(p, "-%}")) return skip_spaces(p + 3);
    if (at(p, "%}")) return p + 2;
    return std::string::npos;
  }

  void root() {
    size_t at_tag = pos_;
    while (true) {
      at_tag = s_.find('{', at_tag);
      if (at_tag == std::string::npos || at_tag + 1 >= s_.size()) {
        push(Tok::Data, s_.substr(pos_), pos_);
        pos_ = s_.size();
        return;
      }
      char k = s_[at_tag + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++at_tag;
    }
    const char kind = s_[at_tag + 1];
    size_t after = at_tag + 2;
    char sign = after < s_.size() && (s_[after] == '-' || s_[after] == '+') ? s_[after] : 0;
    if (sign) ++after;
    std::string text = s_.substr(pos_, at_tag - pos_);
    size_t text_offset = pos_;

    if (kind == '%') {
      size_t raw_end = raw_opener_end(after);
      if (raw_end != std::string::npos) {
        emit_data(std::move(text), sign, true, text_offset);
        line_starting_ = s_[raw_end - 1] == '\n';
        raw(raw_end, at_tag);
        return;
      }
    }
    emit_data(std::move(text), sign, kind != '{', text_offset);
    line_starting_ = false;
    if (kind == '#') {
      comment(after, at_tag);
      return;
    }
    push(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", at_tag);
    pos_ = after;
    tag(kind == '%');
  }

  // After "{% raw %}": everything up to "{% endraw %}" is data.
  void raw(size_t p, size_t opener) {
    for (size_t q = s_.find("{%", p); q != std::string::npos; q = s_.find("{%", q + 1)) {
      size_t r = q + 2;
      char sign = r < s_.size() && (s_[r] == '-' || s_[r] == '+') ? s_[r] : 0;
      if (sign) ++r;
      r = skip_spaces(r);
      if (!at(r, "endraw")) continue;
      r = skip_spaces(r + 6);
      size_t end;
      if (at(r, "+%}")) end = r + 3;
      else if (at(r, "-%}")) end = skip_spaces(r + 3);
      else if (at(r, "%}")) end = r + 2 + (r + 2 < s_.size() && s_[r + 2] == '\n');
      else continue;
      emit_data(s_.substr(p, q - p), sign, true, p);
      line_starting_ = s_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    src_.fail(opener, "missing end of raw directive");
  }

  void comment(size_t p, size_t opener) {
    for (size_t q = s_.find("#}", p); q != std::string::npos; q = s_.find("#}", q + 1)) {
      size_t end;
      if (q > p && s_[q - 1] == '+') end = q + 2;
      else if (q > p && s_[q - 1] == '-') end = skip_spaces(q + 2);
      else end = q + 2 + (q + 2 < s_.size() && s_[q + 2] == '\n');
      line_starting_ = s_[end - 1] == '\n';
      pos_ = end;
      return;
    }
    src_.fail(opener, "missing end of comment tag");
  }

  // Tokens of one {% ... %} or {{ ... }}, up to and including its end.
  void tag(bool block) {
    std::string balance;  // closers expected, innermost last
    while (true) {
      if (pos_ >= s_.size()) return;  // the parser reports the missing end
      if (balance.empty() && end_of_tag(block)) return;
      if (size_t n = space_at(pos_)) {
        pos_ += n;
        continue;
      }
      const size_t start = pos_;
      const char c = s_[pos_];
      if (c >= '0' && c <= '9') {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal();
      } else if (name_char_at(pos_)) {
        size_t p = pos_;
        while (size_t n = name_char_at(p)) p += n;
        push(Tok::Name, s_.substr(pos_, p - pos_), pos_);
        pos_ = p;
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                     "(",  ")",  "{",  "}",  ">",  "<",  "=", ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (at(pos_, o)) {
            op = o;
            break;
          }
        if (!op) {
          size_t n;
          char32_t ch = utf8::decode(s_, pos_, &n);
          src_.fail(start, "unexpected character '" + utf8::encode(ch) + "'");
        }
        std::string o(op);
        if (o == "(" || o == "[" || o == "{") {
          balance += o == "(" ? ')' : o == "[" ? ']' : '}';
        } else if (o == ")" || o == "]" || o == "}") {
          if (balance.empty()) src_.fail(start, "unexpected '" + o + "'");
          if (balance.back() != o[0])
            src_.fail(start, "unexpected '" + o + "', expected '" + std::string(1, balance.back()) + "'");
          balance.pop_back();
        }
        push(Tok::Op, o, start);
        pos_ += o.size();
      }
    }
  }

  bool end_of_tag(bool block) {
    const size_t start = pos_;
    if (block) {
      if (at(pos_, "+%}")) {
        pos_ += 3;
      } else if (at(pos_, "-%}")) {
        pos_ = skip_spaces(pos_ + 3);
      } else if (at(pos_, "%}")) {
        pos_ += 2;
        if (pos_ < s_.size() && s_[pos_] == '\n') ++pos_;  // trim_blocks
      } else {
        return false;
      }
    } else {
      if (at(pos_, "-}}")) pos_ = skip_spaces(pos_ + 3);
      else if (at(pos_, "}}")) pos_ += 2;
      else return false;
    }
    line_starting_ = s_[pos_ - 1] == '\n';
    push(block ? Tok::BlockEnd : Tok::VarEnd, "", start);
    return true;
  }

  // Bytes of the identifier character at p (Python's \w), or 0.
  size_t name_char_at(size_t p) const {
    if (p >= s_.size()) return 0;
    auto b = static_cast<unsigned char>(s_[p]);
    if (b < 0x80) return (std::isalnum(b) || b == '_') ? 1 : 0;
    size_t n;
    char32_t c = utf8::decode(s_, p, &n);
    return pystr::is_word_char(c) ? n : 0;
  }

  static bool digit(char c) { return c >= '0' && c <= '9'; }

  // (\d+_)*\d+ at p: end of the digits, or p when none.
  size_t digits(size_t p) const {
    size_t q = p;
    while (q < s_.size() && digit(s_[q])) {
      while (q < s_.size() && digit(s_[q])) ++q;
      if (q + 1 < s_.size() && s_[q] == '_' && digit(s_[q + 1])) ++q;
    }
    return q;
  }

  void number() {
    const size_t start = pos_;
    size_t p = digits(pos_);
    size_t end = std::string::npos;  // end of a float literal
    bool after_dot = start > 0 && s_[start - 1] == '.';
    if (!after_dot) {
      size_t q = p;
      bool fraction = false;
      if (q + 1 < s_.size() && s_[q] == '.' && digit(s_[q + 1])) {
        q = digits(q + 1);
        fraction = true;
      }
      size_t e = q;
      if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
        size_t f = e + 1;
        if (f < s_.size() && (s_[f] == '+' || s_[f] == '-')) ++f;
        if (f < s_.size() && digit(s_[f])) e = digits(f);
      }
      if (e != q) end = e;
      else if (fraction) end = q;
    }
    if (end != std::string::npos) {
      std::string text;
      for (size_t i = start; i < end; ++i)
        if (s_[i] != '_') text += s_[i];
      Token t;
      t.type = Tok::Float;
      t.text = s_.substr(start, end - start);
      t.float_value = std::strtod(text.c_str(), nullptr);
      t.offset = start;
      out_.push_back(std::move(t));
      pos_ = end;
      return;
    }
    // Integers: 0b / 0o / 0x prefixes, or decimal without leading zeros.
    int base = 10;
    size_t q = start;
    if (s_[start] == '0' && start + 1 < s_.size()) {
      char x = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[start + 1])));
      base = x == 'b' ? 2 : x == 'o' ? 8 : x == 'x' ? 16 : 10;
    }
    auto valid = [base](char c) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (base == 16) return digit(c) || (c >= 'a' && c <= 'f');
      return c >= '0' && c < static_cast<char>('0' + base);
    };
    std::string text;
    if (base != 10) {
      q = start + 2;
      while (q < s_.size() && (valid(s_[q]) || (s_[q] == '_' && q + 1 < s_.size() && valid(s_[q + 1])))) {
        if (s_[q] != '_') text += s_[q];
        ++q;
      }
      if (text.empty()) {
        base = 10;  // "0x" without digits: the integer 0, then a name
        q = start;
      }
    }
    if (base == 10) {
      text.clear();
      q = start;
      if (s_[q] == '0') {
        text = "0";
        ++q;
        while (q < s_.size() && (s_[q] == '0' || (s_[q] == '_' && q + 1 < s_.size() && s_[q + 1] == '0'))) ++q;
      } else {
        while (q < s_.size() && (digit(s_[q]) || (s_[q] == '_' && q + 1 < s_.size() && digit(s_[q + 1])))) {
          if (s_[q] != '_') text += s_[q];
          ++q;
        }
      }
    }
    errno = 0;
    char* endp = nullptr;
    unsigned long long v = std::strtoull(text.c_str(), &endp, base);
    if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
      src_.fail(start, "integer literal " + s_.substr(start, q - start) + " is too large");
    Token t;
    t.type = Tok::Integer;
    t.text = s_.substr(start, q - start);
    t.int_value = static_cast<int64_t>(v);
    t.offset = start;
    out_.push_back(std::move(t));
    pos_ = q;
  }

  int hex_value(size_t p, size_t n) const {
    int v = 0;
    for (size_t i = p; i < p + n; ++i) {
      if (i >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i]))) return -1;
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[i])));
      v = v * 16 + (digit(c) ? c - '0' : c - 'a' + 10);
    }
    return v;
  }

  // A quoted literal, decoded as Python's "unicode-escape" does.
  void string_literal() {
    const size_t start = pos_;
    const char quote = s_[pos_];
    std::string value;
    size_t p = pos_ + 1;
    while (true) {
      if (p >= s_.size()) src_.fail(start, "unterminated string literal");
      char c = s_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= s_.size()) src_.fail(start, "unterminated string literal");
      char e = s_[p + 1];
      p += 2;
      switch (e) {
        case '\n': break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'n': value += '\n'; break;
        case 'r': value += '\r'; break;
        case 't': value += '\t'; break;
        case 'v': value += '\v'; break;
        case 'x': case 'u': case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          long v = 0;
          for (size_t i = 0; i < n; ++i) {
            int h = hex_value(p + i, 1);
            if (h < 0) src_.fail(start, std::string("truncated \\") + e + " escape in string literal");
            v = v * 16 + h;
          }
          if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            src_.fail(start, "string literal escape is not a Unicode scalar value");
          utf8::append(value, static_cast<char32_t>(v));
          p += n;
          break;
        }
        case 'N': src_.fail(start, "\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            int v = e - '0';
            for (int i = 0; i < 2 && p < s_.size() && s_[p] >= '0' && s_[p] <= '7'; ++i) v = v * 8 + (s_[p++] - '0');
            utf8::append(value, static_cast<char32_t>(v));
          } else {
            value += '\\';
            value += e;
          }
      }
    }
    Token t;
    t.type = Tok::String;
    t.text = std::move(value);
    t.offset = start;
    out_.push_back(std::move(t));
    pos_ = p + 1;
  }
};

}  // namespace

std::vector<Token> tokenize(const Source& source) { return Lexer(source).run(); }

}  // namespace kiln::tokenizers::jinja
