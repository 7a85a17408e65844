#pragma once
// A piece of text being normalized, with the original byte range of every
// normalized byte so token offsets can point into the caller's text. The
// edit operations reproduce tokenizers' NormalizedString alignment rules
// (transform with per-character changes), so offsets agree with Hugging Face.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/tokenizers/pattern.h"
#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

namespace kiln::tokenizers {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Parses "Removed", "Isolated", ... (tokenizer.json spelling).
SplitBehavior parse_split_behavior(const std::string& name, const std::string& where);

class NormalizedString {
 public:
  using Range = std::pair<uint32_t, uint32_t>;
  // One character of a transformation and how it changes the length:
  // 0 replaces a character, +1 inserts one, -n replaces one and removes n more.
  using Change = std::pair<char32_t, int>;

  NormalizedString() = default;
  // `original` is the piece of the input starting at byte `base` of it.
  NormalizedString(std::string_view original, size_t base);

  const std::string& get() const { return normalized_; }
  bool empty() const { return normalized_.empty(); }
  size_t original_start() const { return orig_start_; }
  size_t original_end() const { return orig_end_; }
  // Original (absolute) byte range of normalized bytes [start, end).
  std::pair<size_t, size_t> original_range(size_t start, size_t end) const;

  void transform(const std::vector<Change>& dest, size_t initial_offset);
  void transform_range(size_t n_start, size_t n_end, const std::vector<Change>& dest,
                       size_t initial_offset);

  void normalize(unicode::Form form);
  void lowercase();
  template <typename Keep>
  void filter(Keep keep);
  void prepend(std::string_view s);
  void append(std::string_view s);
  void replace(const Pattern& pattern, std::string_view content);
  void strip(bool left, bool right);

  std::vector<NormalizedString> split(const Pattern& pattern, SplitBehavior behavior) const;
  NormalizedString slice(size_t n_start, size_t n_end) const;
  // What slice(0, size) would give, in place: the original range shrinks to
  // where the normalized characters came from (no-op when empty).
  void narrow_to_alignment();

 private:
  std::string normalized_;
  std::vector<Range> align_;  // one per normalized byte
  size_t orig_start_ = 0;
  size_t orig_end_ = 0;
};

template <typename Keep>
void NormalizedString::filter(Keep keep) {
  // Removing characters keeps every kept character's own alignment.
  std::string out;
  std::vector<Range> align;
  out.reserve(normalized_.size());
  align.reserve(align_.size());
  for (size_t i = 0; i < normalized_.size();) {
    size_t n;
    char32_t c = utf8::decode(normalized_, i, &n);
    if (keep(c)) {
      out.append(normalized_, i, n);
      align.insert(align.end(), align_.begin() + i, align_.begin() + i + n);
    }
    i += n;
  }
  normalized_ = std::move(out);
  align_ = std::move(align);
}

}  // namespace kiln::tokenizers
