#define PCRE2_CODE_UNIT_WIDTH 8
#include "kiln/tokenizers/regex.h"

#include <pcre2.h>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), compiled_(std::make_shared<Compiled>()) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  compiled_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                  PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
  if (!compiled_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw Error(detail::concat(where, ": invalid regex '", pattern, "' at offset ", err_off, ": ",
                               reinterpret_cast<const char*>(msg)));
  }
  // JIT is an optimisation only; matching falls back to the interpreter.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
}

namespace {

bool is_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// One escape of an Oniguruma pattern (pattern[i] is the character after the
// backslash) in PCRE2's spelling; advances i past what it consumed.
std::string onig_escape(const std::string& pattern, size_t& i, bool in_class, const std::string& where) {
  // Oniguruma's word characters: alphabetic (letters, letter numbers such as
  // Roman numerals, circled letters), marks, decimal digits, connectors; as a
  // bare \w or \b also the Latin-1 superscripts and fractions.
  static const std::string class_word = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc})";
  static const std::string bare_word = class_word + R"(\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";
  const std::string& word = in_class ? class_word : bare_word;
  static const std::string space = KILN_REGEX_WHITE_SPACE;
  static const std::string hex = "0-9a-fA-F";
  const char e = pattern[i];
  // PCRE2 has these inside a class with other meanings (\H: not a horizontal
  // space) or other members, and a class cannot hold a negated set.
  KILN_CHECK(!(in_class && (e == 'W' || e == 'S' || e == 'H')), where, ": regex '", pattern, "': \\", e,
             " inside a character class (offset ", i - 1, ") is not supported");
  auto set = [&](const std::string& members, bool negated) -> std::string {
    if (in_class && !negated) return members;
    return (negated ? "[^" : "[") + members + "]";
  };
  if (e == 'w' || (e == 'W' && !in_class)) return set(word, e == 'W');
  if (e == 's' || (e == 'S' && !in_class)) return set(space, e == 'S');
  // Word boundaries between Oniguruma's word characters (a mark after a
  // letter is no boundary there; PCRE2's \b sees one).
  const std::string w = "[" + word + "]";
  if (e == 'b' && !in_class) return "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))";
  if (e == 'B' && !in_class) return "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
  // Oniguruma's \h is a hexadecimal digit (PCRE2's: horizontal space).
  if (e == 'h' || (e == 'H' && !in_class)) return set(hex, e == 'H');
  if (e == 'u' && i + 4 < pattern.size() &&
      is_hex(pattern[i + 1]) && is_hex(pattern[i + 2]) && is_hex(pattern[i + 3]) &&
      is_hex(pattern[i + 4])) {
    std::string out = "\\x{" + pattern.substr(i + 1, 4) + "}";
    i += 4;
    return out;
  }
  return std::string{'\\', e};
}

}  // namespace

Regex Regex::from_onig(const std::string& pattern, const std::string& where) {
  std::string out;
  int depth = 0;  // character class nesting
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    const bool in_class = depth > 0;
    if (c == '\\' && i + 1 < pattern.size()) {
      ++i;
      out += onig_escape(pattern, i, in_class, where);
      continue;
    }
    if (c == '[' && in_class && pattern.compare(i, 2, "[:") == 0) {
      // A POSIX bracket ([:alpha:]) is the same in PCRE2.
      const size_t close = pattern.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(pattern, i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (c == '[') {
      // Oniguruma nests classes ([a[bc]] is a, b or c); PCRE2 reads a '['
      // inside a class as a literal, so a nested class is merged into the
      // one around it, which is its meaning unless it is negated.
      KILN_CHECK(!in_class || i + 1 >= pattern.size() || pattern[i + 1] != '^', where,
                 ": regex '", pattern, "': a negated character class inside another one (offset ", i,
                 ") is not supported");
      if (!in_class) out += c;
      ++depth;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') {
        ++i;
        out += "\\]";
      }
      continue;
    }
    if (c == ']' && in_class) {
      if (--depth == 0) out += c;
      continue;
    }
    KILN_CHECK(!(in_class && c == '&' && i + 1 < pattern.size() && pattern[i + 1] == '&'), where,
               ": regex '", pattern, "': character class intersection (&&, offset ", i,
               ") is not supported");
    out += c;
  }
  return Regex(out, where);
}

namespace {
// Match data is per thread: batch encoding runs the same regex concurrently.
struct MatchData {
  pcre2_match_data* data = pcre2_match_data_create(32, nullptr);
  ~MatchData() { pcre2_match_data_free(data); }
};
}  // namespace

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  thread_local MatchData md;
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    int rc = pcre2_match(compiled_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md.data,
                         nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    KILN_CHECK(rc >= 0, "regex '", pattern_, "': matching failed with PCRE2 error ", rc);
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.data);
    size_t start = ov[0], end = ov[1];
    out.emplace_back(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (end >= s.size()) break;
      pos = end + utf8::seq_len(static_cast<unsigned char>(s[end]));
    }
  }
}

namespace {
// The match of `code` anchored at the start of `s` (and at its end with
// `whole`) into `md`: true, or false for none; PCRE2's errors throw.
bool anchored_match(pcre2_code* code, const std::string& pattern, std::string_view s, bool whole,
                    pcre2_match_data* md) {
  const uint32_t options = PCRE2_ANCHORED | (whole ? PCRE2_ENDANCHORED : 0u);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, options, md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(rc, msg, sizeof msg);
    throw Error(detail::concat("regex '", pattern, "': matching '", std::string(s), "' failed: ",
                               reinterpret_cast<const char*>(msg)));
  }
  return true;
}
}  // namespace

bool Regex::full_match(std::string_view s) const {
  thread_local MatchData md;
  return anchored_match(compiled_->code, pattern_, s, true, md.data);
}

std::optional<std::vector<std::string>> Regex::match_start(std::string_view s) const {
  // Room for every group of the pattern.
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(compiled_->code, nullptr), pcre2_match_data_free);
  if (!anchored_match(compiled_->code, pattern_, s, false, md.get())) return std::nullopt;
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  const uint32_t pairs = pcre2_get_ovector_count(md.get());
  uint32_t groups = 0;
  pcre2_pattern_info(compiled_->code, PCRE2_INFO_CAPTURECOUNT, &groups);
  std::vector<std::string> out;
  for (uint32_t g = 0; g <= groups; ++g) {
    const bool set = g < pairs && ov[2 * g] != PCRE2_UNSET;
    out.push_back(set ? std::string(s.substr(ov[2 * g], ov[2 * g + 1] - ov[2 * g])) : std::string());
  }
  return out;
}

}  // namespace kiln::tokenizers
