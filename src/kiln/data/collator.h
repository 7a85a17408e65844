#pragma once
// Batches from tokenized rows: padding (DataCollatorWithPadding) and masked-LM
// masking (DataCollatorForLanguageModeling). Padding to a fixed length or to a
// multiple keeps the number of distinct [B, T] shapes, and so of compiled
// steps, small.
#include <cstdint>
#include <vector>

#include "kiln/data/features.h"

namespace kiln::data {

// A host batch: row-major [B, T] arrays (T = padded length).
struct Batch {
  int64_t batch_size = 0, seq_len = 0;
  std::vector<int64_t> input_ids, attention_mask, token_type_ids;
  std::vector<int64_t> labels;      // [B] classification, [B,T] MLM (-100 = ignored), or empty
  bool token_labels = false;        // labels are [B,T] (one per token): with T == 1 the size alone cannot tell
  std::vector<float> float_labels;  // [B] regression, or empty
  std::vector<int64_t> start_positions, end_positions;  // [B] question answering, or empty
  // Packed rows (Features::seq_lengths): [B, T] positions restarting at 0 for every example (0 on padding),
  // as TRL's padding-free collator gives them; else empty.
  std::vector<int64_t> position_ids;
  // Multiple choice: input_ids, attention_mask and token_type_ids are [B, num_choices, T], labels [B].
  int64_t num_choices = 0;
  std::vector<int64_t> indices;     // dataset row of each example (global sample index)
  int64_t target_len = 0;           // seq2seq: labels are [B, target_len]
  // A replica's share of a global batch (LoaderOptions::num_shards): where it
  // starts in the batch, and 0 for a placeholder row that must not count.
  int64_t first_sample = 0;
  double weight = 1;
};

struct CollatorOptions {
  int64_t pad_token_id = 0;
  int64_t max_length = 128;         // pad_to_max_length: every batch is [B, max_length]
  bool pad_to_max_length = false;
  int64_t pad_to_multiple_of = 0;   // else pad to the longest row rounded up to this (0 = exact longest)
  bool mlm = false;                 // masked-LM: labels = original ids at masked positions, -100 elsewhere
  int64_t max_target_length = 0;   // seq2seq: with pad_to_max_length, labels are [B, max_target_length]
  bool causal_lm = false;           // causal LM: labels = input_ids (the model shifts them), -100 on padding
  double mlm_probability = 0.15;    // of non-special, non-padding tokens; 80% -> mask_token_id, 10% random id, 10% kept
  int64_t mask_token_id = 103;
  int64_t vocab_size = 30522;
  std::vector<int64_t> special_token_ids;  // never masked
  uint64_t seed = 42;               // MLM masking is a function of (seed, epoch, row index): independent of batch
                                    // composition, thread or replica count
};

// rows: indices into f. A row longer than max_length with pad_to_max_length is
// an error (tokenize with the same max_length).
// pad_like: rows whose lengths set the padding instead of `rows` (a replica's
// share of a global batch pads like the whole batch, so every split of the
// batch has the same shapes).
Batch collate(const Features& f, const std::vector<int64_t>& rows, const CollatorOptions& o, int64_t epoch,
              const std::vector<int64_t>* pad_like = nullptr);

// Counter-based randomness shared by the collator and the loader.
uint64_t splitmix64(uint64_t x);
// A hash of several words, each mixed in turn.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0);
// Uniform in [0, 1) from 53 bits of h.
inline double unit_double(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace kiln::data
