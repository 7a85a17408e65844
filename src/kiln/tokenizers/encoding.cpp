#include "kiln/tokenizers/encoding.h"

#include "kiln/core/error.h"

namespace kiln::tokenizers {

void Encoding::push(uint32_t id, uint32_t type_id, std::string token,
                    std::pair<size_t, size_t> offset, bool special, std::optional<uint32_t> word,
                    std::optional<uint32_t> sequence) {
  ids.push_back(id);
  type_ids.push_back(type_id);
  tokens.push_back(std::move(token));
  offsets.push_back(offset);
  special_tokens_mask.push_back(special ? 1 : 0);
  attention_mask.push_back(1);
  word_ids.push_back(word);
  sequence_ids.push_back(sequence);
}

template <typename T>
static void extend(std::vector<T>& a, const std::vector<T>& b) {
  a.insert(a.end(), b.begin(), b.end());
}

void Encoding::append(const Encoding& o) {
  extend(ids, o.ids);
  extend(type_ids, o.type_ids);
  extend(tokens, o.tokens);
  extend(offsets, o.offsets);
  extend(special_tokens_mask, o.special_tokens_mask);
  extend(attention_mask, o.attention_mask);
  extend(word_ids, o.word_ids);
  extend(sequence_ids, o.sequence_ids);
}

void Encoding::set_type_ids(uint32_t type_id) { type_ids.assign(ids.size(), type_id); }

void Encoding::set_sequence_id(uint32_t sequence) {
  sequence_ids.assign(ids.size(), sequence);
  for (Encoding& piece : overflowing) piece.set_sequence_id(sequence);
}

void Encoding::merge_with(const Encoding& pair) {
  std::vector<Encoding> pieces;
  for (const Encoding& mine : overflowing) {
    pieces.push_back(mine);
    pieces.back().merge_with(pair);
    for (const Encoding& theirs : pair.overflowing) {
      pieces.push_back(mine);
      pieces.back().merge_with(theirs);
    }
  }
  for (const Encoding& theirs : pair.overflowing) {
    pieces.push_back(*this);
    pieces.back().merge_with(theirs);
  }
  append(pair);
  overflowing = std::move(pieces);
}

template <typename T>
static std::vector<T> slice(const std::vector<T>& v, size_t start, size_t stop) {
  return {v.begin() + static_cast<long>(start), v.begin() + static_cast<long>(stop)};
}

void Encoding::truncate(size_t max_length, size_t stride, Direction d) {
  const size_t n = ids.size();
  if (max_length >= n) return;
  if (max_length == 0) {
    Encoding all = std::move(*this);
    *this = Encoding{};
    overflowing.push_back(std::move(all));
    return;
  }
  KILN_CHECK(stride < max_length, "Truncation error: stride ", stride,
             " must be smaller than the max_length ", max_length,
             " a sequence is cut to (max_length less the special tokens, and for "
             "LongestFirst pairs the share of one text)");
  // Windows [start, stop) from the kept end, each step max_length - stride
  // tokens, until one reaches the other end.
  const size_t step = max_length - stride;
  std::vector<std::pair<size_t, size_t>> windows;
  if (d == Direction::Right) {
    for (size_t start = 0;; start += step) {
      size_t stop = std::min(start + max_length, n);
      windows.emplace_back(start, stop);
      if (stop == n) break;
    }
  } else {
    for (size_t stop = n;; stop -= step) {
      size_t start = stop > max_length ? stop - max_length : 0;
      windows.emplace_back(start, stop);
      if (start == 0) break;
    }
  }
  std::vector<Encoding> pieces;
  for (auto [start, stop] : windows) {
    Encoding e;
    e.ids = slice(ids, start, stop);
    e.type_ids = slice(type_ids, start, stop);
    e.tokens = slice(tokens, start, stop);
    e.offsets = slice(offsets, start, stop);
    e.special_tokens_mask = slice(special_tokens_mask, start, stop);
    e.attention_mask = slice(attention_mask, start, stop);
    e.word_ids = slice(word_ids, start, stop);
    e.sequence_ids = slice(sequence_ids, start, stop);
    pieces.push_back(std::move(e));
  }
  *this = std::move(pieces[0]);
  overflowing.assign(std::make_move_iterator(pieces.begin() + 1),
                     std::make_move_iterator(pieces.end()));
}

template <typename T>
static void grow(std::vector<T>& v, size_t n, const T& value, Direction d) {
  size_t add = n - v.size();
  if (d == Direction::Right) {
    v.insert(v.end(), add, value);
  } else {
    v.insert(v.begin(), add, value);
  }
}

void Encoding::pad(size_t target, uint32_t pad_id, uint32_t pad_type_id,
                   const std::string& pad_token, Direction d) {
  for (Encoding& piece : overflowing) piece.pad(target, pad_id, pad_type_id, pad_token, d);
  if (ids.size() >= target) return;
  grow(ids, target, pad_id, d);
  grow(type_ids, target, pad_type_id, d);
  grow(tokens, target, pad_token, d);
  grow(offsets, target, std::pair<size_t, size_t>{0, 0}, d);
  grow(special_tokens_mask, target, 1u, d);
  grow(attention_mask, target, 0u, d);
  grow(word_ids, target, std::optional<uint32_t>{}, d);
  grow(sequence_ids, target, std::optional<uint32_t>{}, d);
}

}  // namespace kiln::tokenizers
