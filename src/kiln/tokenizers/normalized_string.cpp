#include "kiln/tokenizers/normalized_string.h"

#include <algorithm>

#include "kiln/core/error.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

SplitBehavior parse_split_behavior(const std::string& name, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  throw Error(detail::concat(where, ": unknown split behavior '", name,
                             "', expected Removed, Isolated, MergedWithPrevious, "
                             "MergedWithNext or Contiguous"));
}

NormalizedString::NormalizedString(std::string_view original, size_t base)
    : normalized_(original), orig_start_(base), orig_end_(base + original.size()) {
  align_.resize(original.size());
  for (size_t i = 0; i < original.size();) {
    size_t n = utf8::seq_len(static_cast<unsigned char>(original[i]));
    if (i + n > original.size()) n = original.size() - i;
    Range r{static_cast<uint32_t>(base + i), static_cast<uint32_t>(base + i + n)};
    for (size_t k = 0; k < n; ++k) align_[i + k] = r;
    i += n;
  }
}

std::pair<size_t, size_t> NormalizedString::original_range(size_t start, size_t end) const {
  // tokenizers' convert_offsets: an empty range maps to itself (relative to
  // this piece), any other range spans its first to its last byte's origin.
  if (start >= end || end > align_.size()) return {orig_start_ + start, orig_start_ + end};
  return {align_[start].first, align_[end - 1].second};
}

void NormalizedString::transform(const std::vector<Change>& dest, size_t initial_offset) {
  transform_range(0, normalized_.size(), dest, initial_offset);
}

void NormalizedString::transform_range(size_t n_start, size_t n_end,
                                       const std::vector<Change>& dest, size_t initial_offset) {
  size_t replaced = n_start;  // next character of the old range to consume
  auto consume = [&]() -> size_t {
    if (replaced >= n_end) return 0;
    size_t n = utf8::seq_len(static_cast<unsigned char>(normalized_[replaced]));
    replaced += n;
    return n;
  };
  for (size_t k = 0; k < initial_offset; ++k) consume();
  size_t offset = replaced;
  Range fallback{static_cast<uint32_t>(orig_start_), static_cast<uint32_t>(orig_start_)};
  auto align_at = [&](size_t idx) -> Range {
    if (idx < align_.size()) return align_[idx];
    return align_.empty() ? fallback : align_.back();
  };

  std::string out;
  std::vector<Range> align;
  out.reserve(n_end - n_start + dest.size());
  align.reserve(n_end - n_start + dest.size());
  for (const auto& [c, change] : dest) {
    size_t idx = offset;
    // An inserted character takes the alignment of the one before it.
    Range a = change > 0 ? (idx < 1 ? fallback : align_at(idx - 1)) : align_at(idx);
    if (change <= 0) offset += consume();
    for (int k = 0; k < -change; ++k) offset += consume();
    size_t before = out.size();
    utf8::append(out, c);
    align.insert(align.end(), out.size() - before, a);
  }
  normalized_.replace(n_start, n_end - n_start, out);
  align_.erase(align_.begin() + n_start, align_.begin() + n_end);
  align_.insert(align_.begin() + n_start, align.begin(), align.end());
}

void NormalizedString::normalize(unicode::Form form) {
  if (unicode::is_normalized(normalized_, form)) return;
  std::vector<unicode::Tagged> tagged = unicode::normalize(utf8::to_u32(normalized_), form);
  std::vector<Change> changes;
  changes.reserve(tagged.size());
  for (const unicode::Tagged& t : tagged) changes.emplace_back(t.c, t.change);
  transform(changes, 0);
}

void NormalizedString::lowercase() {
  bool ascii_lower = true;
  for (char c : normalized_) {
    if ((c & 0x80) || (c >= 'A' && c <= 'Z')) {
      ascii_lower = false;
      break;
    }
  }
  if (ascii_lower) return;
  std::vector<Change> changes;
  changes.reserve(normalized_.size());
  std::u32string low;
  for (size_t i = 0; i < normalized_.size();) {
    size_t n;
    char32_t c = utf8::decode(normalized_, i, &n);
    low.clear();
    unicode::lowercase(c, low);
    for (size_t k = 0; k < low.size(); ++k) changes.emplace_back(low[k], k > 0 ? 1 : 0);
    i += n;
  }
  transform(changes, 0);
}

void NormalizedString::prepend(std::string_view s) {
  if (normalized_.empty() || s.empty()) return;
  size_t n;
  char32_t next = utf8::decode(normalized_, 0, &n);
  std::vector<Change> changes;
  bool first = true;
  for (char32_t c : utf8::to_u32(s)) {
    changes.emplace_back(c, first ? 0 : 1);
    first = false;
  }
  changes.emplace_back(next, 1);
  transform_range(0, n, changes, 0);
}

void NormalizedString::append(std::string_view s) {
  if (normalized_.empty() || s.empty()) return;
  size_t last = normalized_.size() - 1;
  while (last > 0 && (static_cast<unsigned char>(normalized_[last]) & 0xC0) == 0x80) --last;
  size_t n;
  char32_t prev = utf8::decode(normalized_, last, &n);
  std::vector<Change> changes{{prev, 0}};
  for (char32_t c : utf8::to_u32(s)) changes.emplace_back(c, 1);
  transform_range(last, normalized_.size(), changes, 0);
}

void NormalizedString::replace(const Pattern& pattern, std::string_view content) {
  std::vector<Match> matches = pattern.find_matches(normalized_);
  std::u32string repl = utf8::to_u32(content);
  // Apply from the back so earlier byte positions stay valid.
  for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
    if (!it->is_match) continue;
    size_t removed = utf8::count_chars(std::string_view(normalized_).substr(it->start, it->end - it->start));
    std::vector<Change> changes;
    for (char32_t c : repl) changes.emplace_back(c, 1);
    transform_range(it->start, it->end, changes, removed);
  }
}

void NormalizedString::strip(bool left, bool right) {
  std::u32string chars = utf8::to_u32(normalized_);
  size_t lead = 0, trail = 0;
  if (left) {
    while (lead < chars.size() && unicode::is_whitespace(chars[lead])) ++lead;
  }
  if (right) {
    while (trail < chars.size() - lead && unicode::is_whitespace(chars[chars.size() - 1 - trail])) {
      ++trail;
    }
  }
  if (lead == 0 && trail == 0) return;
  size_t idx = 0;
  filter([&](char32_t) {
    bool keep = idx >= lead && idx < chars.size() - trail;
    ++idx;
    return keep;
  });
}

NormalizedString NormalizedString::slice(size_t n_start, size_t n_end) const {
  NormalizedString s;
  s.normalized_ = normalized_.substr(n_start, n_end - n_start);
  s.align_.assign(align_.begin() + n_start, align_.begin() + n_end);
  if (n_end > n_start) {
    s.orig_start_ = align_[n_start].first;
    s.orig_end_ = align_[n_end - 1].second;
  } else {
    s.orig_start_ = s.orig_end_ = n_start < align_.size() ? align_[n_start].first : orig_end_;
  }
  return s;
}

void NormalizedString::narrow_to_alignment() {
  if (align_.empty()) return;
  orig_start_ = align_.front().first;
  orig_end_ = align_.back().second;
}

std::vector<NormalizedString> NormalizedString::split(const Pattern& pattern,
                                                      SplitBehavior behavior) const {
  std::vector<Match> matches = pattern.find_matches(normalized_);
  // (start, end, remove)
  struct Piece {
    size_t start, end;
    bool remove;
  };
  std::vector<Piece> pieces;
  pieces.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const auto& m : matches) pieces.push_back({m.start, m.end, false});
      break;
    case SplitBehavior::Removed:
      for (const auto& m : matches) pieces.push_back({m.start, m.end, m.is_match});
      break;
    case SplitBehavior::Contiguous: {
      bool prev = false;
      for (const auto& m : matches) {
        if (m.is_match == prev && !pieces.empty()) {
          pieces.back().end = m.end;
        } else {
          pieces.push_back({m.start, m.end, false});
        }
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev = false;
      for (const auto& m : matches) {
        if (m.is_match && !prev && !pieces.empty()) {
          pieces.back().end = m.end;
        } else {
          pieces.push_back({m.start, m.end, false});
        }
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !prev && !pieces.empty()) {
          pieces.back().start = it->start;
        } else {
          pieces.push_back({it->start, it->end, false});
        }
        prev = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
  }
  std::vector<NormalizedString> out;
  out.reserve(pieces.size());
  for (const auto& p : pieces) {
    if (!p.remove) out.push_back(slice(p.start, p.end));
  }
  return out;
}

}  // namespace kiln::tokenizers
