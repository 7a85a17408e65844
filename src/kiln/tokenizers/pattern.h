#pragma once
// What a split or a replace looks for: one character, a character class, a
// literal string or a regex. find_matches() covers the whole input with
// alternating (range, is_match) pieces, exactly as tokenizers' Pattern trait.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/tokenizers/regex.h"

namespace kiln::tokenizers {

struct Match {
  size_t start;
  size_t end;
  bool is_match;
};

class Pattern {
 public:
  using CharPredicate = bool (*)(char32_t);

  static Pattern of_char(char32_t c);
  static Pattern of_predicate(CharPredicate pred);
  static Pattern of_string(std::string literal);
  static Pattern of_regex(Regex regex);
  Pattern inverted() const;

  std::vector<Match> find_matches(std::string_view s) const;

 private:
  enum class Kind { Char, Predicate, String, Regex } kind_ = Kind::Char;
  char32_t ch_ = 0;
  CharPredicate pred_ = nullptr;
  std::string literal_;
  std::optional<Regex> regex_;
  bool invert_ = false;
};

}  // namespace kiln::tokenizers
