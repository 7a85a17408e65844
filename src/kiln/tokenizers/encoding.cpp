#include "kiln/tokenizers/encoding.h"

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

void Encoding::set_sequence_id(uint32_t sequence) { sequence_ids.assign(ids.size(), sequence); }

template <typename T>
static void keep(std::vector<T>& v, size_t n, Direction d) {
  if (v.size() <= n) return;
  if (d == Direction::Right) {
    v.resize(n);
  } else {
    v.erase(v.begin(), v.end() - static_cast<long>(n));
  }
}

void Encoding::truncate(size_t max_length, Direction d) {
  keep(ids, max_length, d);
  keep(type_ids, max_length, d);
  keep(tokens, max_length, d);
  keep(offsets, max_length, d);
  keep(special_tokens_mask, max_length, d);
  keep(attention_mask, max_length, d);
  keep(word_ids, max_length, d);
  keep(sequence_ids, max_length, d);
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
