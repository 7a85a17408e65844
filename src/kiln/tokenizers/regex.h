#pragma once
// A compiled PCRE2 regular expression in UTF + UCP mode (Unicode classes for
// \w, \d, \p{L}, ...), JIT-compiled when the platform supports it.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// The members of a character class for Unicode's White_Space, which is
// Oniguruma's \s (what tokenizers matches with): PCRE2's UCP \s lacks U+0085
// and has U+180E, a space before Unicode 6.3.
#define KILN_REGEX_WHITE_SPACE \
  R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})"

namespace kiln::tokenizers {

class Regex {
 public:
  // Throws kiln::Error naming `where` and the PCRE2 message on a bad pattern.
  Regex(const std::string& pattern, const std::string& where);
  // A pattern written for Oniguruma (what tokenizers compiles Split and
  // Replace patterns with): \w, \b and \s get Oniguruma's Unicode meaning
  // (\w includes marks; \s includes U+0085), which PCRE2's UCP mode lacks;
  // \h is a hex digit, \uHHHH a code point, and a class nested in a class
  // is merged into it. Class intersection (&&), negated nested classes and
  // \W, \S, \H inside a class are errors naming `where`.
  static Regex from_onig(const std::string& pattern, const std::string& where);
  // Appends the byte ranges of all non-overlapping matches in s (valid UTF-8).
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;
  // Python's re.fullmatch: whether the whole of `s` matches.
  bool full_match(std::string_view s) const;
  // Python's re.match: a match that starts where `s` does, as the text of
  // each group (group 0, the whole match, first; a group that took no part,
  // empty), or nothing. Both throw kiln::Error when PCRE2 gives up (its match
  // limit: a pattern that backtracks without end), never hang.
  std::optional<std::vector<std::string>> match_start(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Compiled;
  std::string pattern_;
  std::shared_ptr<Compiled> compiled_;
};

}  // namespace kiln::tokenizers
