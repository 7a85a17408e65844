#include "kiln/data/collator.h"

#include <algorithm>

#include "kiln/core/error.h"

namespace kiln::data {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ a);
  h = splitmix64(h ^ b);
  return splitmix64(h ^ c);
}

namespace {
// The padded length of a batch whose longest row (or choice) has `longest` tokens.
int64_t padded_length(int64_t longest, const CollatorOptions& o, const char* what) {
  if (o.pad_to_max_length) {
    KILN_CHECK(longest <= o.max_length, "collate: a ", what, " has ", longest, " tokens, more than max_length ",
               o.max_length, " (tokenize with truncation to the same max_length)");
    return o.max_length;
  }
  if (o.pad_to_multiple_of > 0 && longest % o.pad_to_multiple_of)
    return longest + o.pad_to_multiple_of - longest % o.pad_to_multiple_of;
  return longest;
}

// A batch of `rows` with `sequences` sequences of T padding tokens (attention mask and token types 0).
Batch blank_batch(const std::vector<int64_t>& rows, int64_t sequences, int64_t T, const CollatorOptions& o) {
  Batch b;
  b.batch_size = static_cast<int64_t>(rows.size());
  b.seq_len = T;
  b.indices = rows;
  b.input_ids.assign(sequences * T, o.pad_token_id);
  b.attention_mask.assign(sequences * T, 0);
  b.token_type_ids.assign(sequences * T, 0);
  return b;
}

// Multiple choice (DataCollatorForMultipleChoice): every choice of every row padded to the longest choice.
Batch collate_choices(const Features& f, const std::vector<int64_t>& rows, const CollatorOptions& o,
                      const std::vector<int64_t>& pad_like) {
  const auto C = static_cast<int64_t>(f.choice_lengths[static_cast<size_t>(rows[0])].size());
  int64_t longest = 0;
  for (int64_t r : pad_like)
    for (int64_t len : f.choice_lengths[static_cast<size_t>(r)]) longest = std::max(longest, len);
  const int64_t T = padded_length(longest, o, "choice");
  const auto B = static_cast<int64_t>(rows.size());
  Batch b = blank_batch(rows, B * C, T, o);
  b.num_choices = C;
  for (int64_t i = 0; i < B; ++i) {
    const auto r = static_cast<size_t>(rows[i]);
    KILN_CHECK(static_cast<int64_t>(f.choice_lengths[r].size()) == C, "collate: row ", rows[i], " has ",
               f.choice_lengths[r].size(), " choices, row ", rows[0], " has ", C);
    int64_t from = 0;
    for (int64_t k = 0; k < C; ++k) {
      const int64_t len = f.choice_lengths[r][static_cast<size_t>(k)], at = (i * C + k) * T;
      std::copy_n(f.input_ids[r].begin() + from, len, b.input_ids.begin() + at);
      std::copy_n(f.token_type_ids[r].begin() + from, len, b.token_type_ids.begin() + at);
      std::fill_n(b.attention_mask.begin() + at, len, 1);
      from += len;
    }
  }
  if (!f.labels.empty())
    for (int64_t r : rows) b.labels.push_back(f.labels[static_cast<size_t>(r)]);
  return b;
}
// Packed rows: each example's positions count from 0, and its first token is no target (TRL's padding-free
// collator sets labels -100 where position_ids == 0), so no example is trained to predict the next one's start.
void restart_positions(const Features& f, const std::vector<int64_t>& rows, Batch& b) {
  const int64_t T = b.seq_len;
  b.position_ids.assign(static_cast<size_t>(b.batch_size * T), 0);
  for (int64_t i = 0; i < b.batch_size; ++i) {
    int64_t at = i * T;
    for (int64_t len : f.seq_lengths[static_cast<size_t>(rows[i])]) {
      for (int64_t p = 0; p < len; ++p) b.position_ids[at + p] = p;
      if (!b.labels.empty()) b.labels[at] = -100;
      at += len;
    }
    KILN_CHECK(at <= (i + 1) * T, "collate: row ", rows[i], "'s packed examples are longer than the row");
  }
}
}  // namespace

Batch collate(const Features& f, const std::vector<int64_t>& rows, const CollatorOptions& o, int64_t epoch,
              const std::vector<int64_t>* pad_like) {
  const auto n = static_cast<int64_t>(f.size());
  KILN_CHECK(!rows.empty(), "collate: no rows");
  if (!pad_like) pad_like = &rows;
  if (!f.choice_lengths.empty()) {
    for (const auto* list : {&rows, pad_like})
      for (int64_t r : *list) KILN_CHECK(r >= 0 && r < n, "collate: row ", r, " out of range (", n, " rows)");
    return collate_choices(f, rows, o, *pad_like);
  }
  for (int64_t r : rows) KILN_CHECK(r >= 0 && r < n, "collate: row ", r, " out of range (", n, " rows)");
  int64_t longest = 0;
  for (int64_t r : *pad_like) {
    KILN_CHECK(r >= 0 && r < n, "collate: row ", r, " out of range (", n, " rows)");
    longest = std::max<int64_t>(longest, static_cast<int64_t>(f.input_ids[r].size()));
  }
  const int64_t T = padded_length(longest, o, "row");
  const auto B = static_cast<int64_t>(rows.size());
  Batch b = blank_batch(rows, B, T, o);
  bool have_types = f.token_type_ids.size() == f.input_ids.size();
  for (int64_t i = 0; i < B; ++i) {
    const auto& ids = f.input_ids[rows[i]];
    std::copy(ids.begin(), ids.end(), b.input_ids.begin() + i * T);
    std::fill_n(b.attention_mask.begin() + i * T, ids.size(), 1);
    if (have_types) {
      const auto& tt = f.token_type_ids[rows[i]];
      std::copy(tt.begin(), tt.begin() + std::min(tt.size(), ids.size()), b.token_type_ids.begin() + i * T);
    }
  }

  if (o.mlm) {
    KILN_CHECK(o.vocab_size > 0, "collate: mlm needs vocab_size > 0");
    // HF's DataCollatorForLanguageModeling, with each decision drawn from a
    // hash of (seed, epoch, row, position) instead of a global generator:
    //   masked with p; of those 80% -> [MASK], 10% -> random id, 10% kept.
    b.labels.assign(B * T, -100);
    b.token_labels = true;
    for (int64_t i = 0; i < B; ++i) {
      const auto row = static_cast<uint64_t>(rows[i]);
      const auto len = static_cast<int64_t>(f.input_ids[rows[i]].size());
      for (int64_t t = 0; t < len; ++t) {
        int64_t& id = b.input_ids[i * T + t];
        if (id == o.pad_token_id ||
            std::find(o.special_token_ids.begin(), o.special_token_ids.end(), id) != o.special_token_ids.end())
          continue;
        uint64_t h = mix_seed(o.seed, static_cast<uint64_t>(epoch), row, static_cast<uint64_t>(t));
        if (unit_double(h) >= o.mlm_probability) continue;
        b.labels[i * T + t] = id;
        double action = unit_double(splitmix64(h ^ 0x6D61736Bull));
        if (action < 0.8)
          id = o.mask_token_id;
        else if (action < 0.9)
          id = static_cast<int64_t>(splitmix64(h ^ 0x72616E64ull) % static_cast<uint64_t>(o.vocab_size));
      }
    }
  } else if (!f.target_ids.empty()) {
    // Seq2seq targets: [B, longest target], padding -100 (ignored by the loss).
    size_t Tt = 0;
    for (int64_t r : *pad_like) Tt = std::max(Tt, f.target_ids[r].size());
    if (o.pad_to_max_length && o.max_target_length > 0) Tt = std::max(Tt, static_cast<size_t>(o.max_target_length));
    b.labels.assign(B * Tt, -100);
    for (int64_t i = 0; i < B; ++i) {
      const auto& t = f.target_ids[rows[i]];
      std::copy(t.begin(), t.end(), b.labels.begin() + i * static_cast<int64_t>(Tt));
    }
    b.target_len = static_cast<int64_t>(Tt);
  } else if (!f.token_labels.empty()) {
    // Token classification (DataCollatorForTokenClassification): tags padded with -100.
    b.labels.assign(B * T, -100);
    b.token_labels = true;
    for (int64_t i = 0; i < B; ++i) {
      const auto& tags = f.token_labels[rows[i]];
      std::copy(tags.begin(), tags.end(), b.labels.begin() + i * T);
    }
  } else if (o.causal_lm) {
    // DataCollatorForLanguageModeling(mlm=False): labels are the ids, padding ignored.
    b.labels.assign(B * T, -100);
    b.token_labels = true;
    for (int64_t i = 0; i < B; ++i) {
      const auto& ids = f.input_ids[rows[i]];
      std::copy(ids.begin(), ids.end(), b.labels.begin() + i * T);
    }
  } else if (!f.labels.empty()) {
    for (int64_t r : rows) b.labels.push_back(f.labels[r]);
  } else if (!f.float_labels.empty()) {
    for (int64_t r : rows) b.float_labels.push_back(f.float_labels[r]);
  }
  if (!f.seq_lengths.empty()) restart_positions(f, rows, b);
  if (!f.start_positions.empty())
    for (int64_t r : rows) {
      b.start_positions.push_back(f.start_positions[r]);
      b.end_positions.push_back(f.end_positions[r]);
    }
  return b;
}

}  // namespace kiln::data
