#pragma once
// The demo data set the README's main job fine-tunes on: sentiment of short
// product reviews, generated from templates and word lists so that the label
// depends on more than one word (negation flips an adjective, "could not be
// better" is positive, and in "A but B" / "although A, B" the second clause
// decides). Deterministic from the seed.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln::data::demo {

struct Review {
  std::string sentence;
  std::string label;  // "positive" / "negative"
};

// Unique reviews, alternating labels (balanced), from `seed`.
std::vector<Review> generate_reviews(size_t count, uint64_t seed);

// BERT WordPiece vocabulary covering `texts`: [PAD] [UNK] [CLS] [SEP] [MASK],
// every word (lower-cased, split on whitespace and punctuation as BERT's basic
// tokenizer does), then every single character and its "##" continuation, so
// that no lower-case ASCII text maps to [UNK].
std::vector<std::string> build_vocab(const std::vector<std::string>& texts);

// Writes into `dir` (created if needed):
//   train.csv (3000 rows) and validation.csv (600 rows): columns sentence,label,
//     labels "positive" / "negative", balanced, disjoint;
//   test.txt: 10 more reviews, one per line, unlabeled;
//   vocab.txt + tokenizer_config.json: a lower-casing BERT tokenizer
//     (Tokenizer::from_pretrained(dir) loads it).
void write_demo_dataset(const std::filesystem::path& dir, uint64_t seed = 0);

}  // namespace kiln::data::demo
