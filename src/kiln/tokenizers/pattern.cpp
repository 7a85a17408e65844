#include "kiln/tokenizers/pattern.h"

#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

Pattern Pattern::of_char(char32_t c) {
  Pattern p;
  p.kind_ = Kind::Char;
  p.ch_ = c;
  return p;
}

Pattern Pattern::of_predicate(CharPredicate pred) {
  Pattern p;
  p.kind_ = Kind::Predicate;
  p.pred_ = pred;
  return p;
}

Pattern Pattern::of_string(std::string literal) {
  Pattern p;
  p.kind_ = Kind::String;
  p.literal_ = std::move(literal);
  return p;
}

Pattern Pattern::of_regex(Regex regex) {
  Pattern p;
  p.kind_ = Kind::Regex;
  p.regex_.emplace(std::move(regex));
  return p;
}

Pattern Pattern::inverted() const {
  Pattern p = *this;
  p.invert_ = !p.invert_;
  return p;
}

// Turns match ranges into the alternating cover of s.
static void cover(std::string_view s, const std::vector<std::pair<size_t, size_t>>& ranges,
                  std::vector<Match>& out) {
  size_t prev = 0;
  for (auto [start, end] : ranges) {
    if (prev != start) out.push_back({prev, start, false});
    out.push_back({start, end, true});
    prev = end;
  }
  if (prev != s.size()) out.push_back({prev, s.size(), false});
}

std::vector<Match> Pattern::find_matches(std::string_view s) const {
  std::vector<Match> out;
  if (s.empty()) {
    out.push_back({0, 0, false});
    return out;
  }
  switch (kind_) {
    case Kind::Char:
    case Kind::Predicate: {
      size_t last = 0;
      for (size_t i = 0; i < s.size();) {
        size_t n;
        char32_t c = utf8::decode(s, i, &n);
        bool hit = kind_ == Kind::Char ? c == ch_ : pred_(c);
        if (hit) {
          if (last < i) out.push_back({last, i, false});
          out.push_back({i, i + n, true});
          last = i + n;
        }
        i += n;
      }
      if (last < s.size()) out.push_back({last, s.size(), false});
      break;
    }
    case Kind::String: {
      if (literal_.empty()) {
        out.push_back({0, s.size(), false});
        break;
      }
      std::vector<std::pair<size_t, size_t>> ranges;
      for (size_t pos = s.find(literal_); pos != std::string_view::npos;
           pos = s.find(literal_, pos + literal_.size())) {
        ranges.emplace_back(pos, pos + literal_.size());
      }
      cover(s, ranges, out);
      break;
    }
    case Kind::Regex: {
      std::vector<std::pair<size_t, size_t>> ranges;
      regex_->find_all(s, ranges);
      cover(s, ranges, out);
      break;
    }
  }
  if (invert_) {
    for (auto& m : out) m.is_match = !m.is_match;
  }
  return out;
}

}  // namespace kiln::tokenizers
