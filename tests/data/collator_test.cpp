// collate: padding modes, attention mask, labels, and MLM masking statistics.
#include <gtest/gtest.h>

#include <algorithm>

#include "data/util.h"
#include "kiln/data/collator.h"

using namespace kiln::data;
using kiln::testing::error_of;

namespace {
Features three_rows() {
  Features f;
  f.input_ids = {{2, 5, 6, 3}, {2, 7, 3}, {2, 5, 6, 7, 8, 3}};
  f.token_type_ids = {{0, 0, 0, 0}, {0, 0, 0}, {0, 0, 1, 1, 1, 1}};
  f.labels = {1, 0, 2};
  return f;
}

// Rows of length 10..59 of ids in [10, 1000), [CLS]=2 first and [SEP]=3 last.
Features lm_rows(int n) {
  Features f;
  for (int r = 0; r < n; ++r) {
    std::vector<int64_t> ids{2};
    for (int t = 0; t < 8 + r % 50; ++t) ids.push_back(10 + (r * 31 + t * 7) % 990);
    ids.push_back(3);
    f.token_type_ids.emplace_back(ids.size(), 0);
    f.input_ids.push_back(std::move(ids));
  }
  return f;
}

CollatorOptions mlm_options() {
  CollatorOptions o;
  o.mlm = true;
  o.pad_token_id = 0;
  o.mask_token_id = 4;
  o.vocab_size = 1000;
  o.special_token_ids = {2, 3};
  o.seed = 7;
  return o;
}
}  // namespace

TEST(CollateTest, PadsToLongestWithMaskAndTypes) {
  Features f = three_rows();
  Batch b = collate(f, {1, 0}, {}, 0);
  EXPECT_EQ(b.batch_size, 2);
  EXPECT_EQ(b.seq_len, 4);
  EXPECT_EQ(b.input_ids, (std::vector<int64_t>{2, 7, 3, 0, 2, 5, 6, 3}));
  EXPECT_EQ(b.attention_mask, (std::vector<int64_t>{1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(b.token_type_ids, std::vector<int64_t>(8, 0));
  EXPECT_EQ(b.labels, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(b.indices, (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(b.float_labels.empty());
}

TEST(CollateTest, PadsToMultipleAndToMaxLength) {
  Features f = three_rows();
  CollatorOptions multiple;
  multiple.pad_to_multiple_of = 8;
  multiple.pad_token_id = 9;
  Batch m = collate(f, {0, 2}, multiple, 0);
  EXPECT_EQ(m.seq_len, 8);
  EXPECT_EQ(std::vector<int64_t>(m.input_ids.begin(), m.input_ids.begin() + 8),
            (std::vector<int64_t>{2, 5, 6, 3, 9, 9, 9, 9}));
  EXPECT_EQ(std::vector<int64_t>(m.token_type_ids.begin() + 8, m.token_type_ids.end()),
            (std::vector<int64_t>{0, 0, 1, 1, 1, 1, 0, 0}));
  EXPECT_EQ(std::count(m.attention_mask.begin(), m.attention_mask.end(), 1), 10);
  multiple.pad_to_multiple_of = 4;  // already a multiple: unchanged
  EXPECT_EQ(collate(f, {0}, multiple, 0).seq_len, 4);

  CollatorOptions fixed;
  fixed.pad_to_max_length = true;
  fixed.max_length = 16;
  Batch x = collate(f, {1}, fixed, 0);
  EXPECT_EQ(x.seq_len, 16);
  EXPECT_EQ(x.input_ids.size(), 16u);
  fixed.max_length = 5;
  EXPECT_CONTAINS(error_of([&] { collate(f, {2}, fixed, 0); }), "a row has 6 tokens, more than max_length 5");
  EXPECT_CONTAINS(error_of([&] { collate(f, {3}, {}, 0); }), "row 3 out of range (3 rows)");
}

TEST(CollateTest, RegressionLabels) {
  Features f = three_rows();
  f.labels.clear();
  f.float_labels = {0.5f, 1.5f, 2.5f};
  Batch b = collate(f, {2, 0}, {}, 0);
  EXPECT_EQ(b.float_labels, (std::vector<float>{2.5f, 0.5f}));
  EXPECT_TRUE(b.labels.empty());
}

TEST(CollateTest, MlmMaskingStatistics) {
  Features f = lm_rows(400);
  std::vector<int64_t> rows(f.size());
  for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r);
  CollatorOptions o = mlm_options();
  Batch b = collate(f, rows, o, 0);
  ASSERT_EQ(b.labels.size(), b.input_ids.size());
  int64_t candidates = 0, masked = 0, to_mask = 0, random = 0, kept = 0;
  for (int64_t i = 0; i < b.batch_size; ++i)
    for (int64_t t = 0; t < b.seq_len; ++t) {
      size_t k = static_cast<size_t>(i * b.seq_len + t);
      bool real = t < static_cast<int64_t>(f.input_ids[i].size());
      int64_t original = real ? f.input_ids[i][t] : 0;
      bool special = !real || original == 2 || original == 3;
      if (special) {
        EXPECT_EQ(b.labels[k], -100) << "special or padding masked at row " << i << " position " << t;
        EXPECT_EQ(b.input_ids[k], original);
        continue;
      }
      ++candidates;
      if (b.labels[k] == -100) {
        EXPECT_EQ(b.input_ids[k], original);
        continue;
      }
      ++masked;
      EXPECT_EQ(b.labels[k], original);
      if (b.input_ids[k] == 4)
        ++to_mask;
      else if (b.input_ids[k] == original)
        ++kept;
      else
        ++random;
      EXPECT_GE(b.input_ids[k], 0);
      EXPECT_LT(b.input_ids[k], 1000);
    }
  // ~13,000 candidates: 15% +- 1%, and 80/10/10 of the masked within a few points.
  ASSERT_GT(candidates, 10000);
  double rate = static_cast<double>(masked) / static_cast<double>(candidates);
  EXPECT_NEAR(rate, 0.15, 0.01);
  EXPECT_NEAR(static_cast<double>(to_mask) / masked, 0.8, 0.03);
  EXPECT_NEAR(static_cast<double>(random) / masked, 0.1, 0.03);
  EXPECT_NEAR(static_cast<double>(kept) / masked, 0.1, 0.03);
}

TEST(CollateTest, MlmMaskingIndependentOfBatchComposition) {
  Features f = lm_rows(64);
  CollatorOptions o = mlm_options();
  // Row 45 alone, and row 45 inside a batch of other rows padded longer.
  Batch alone = collate(f, {45}, o, 3);
  Batch inside = collate(f, {49, 45, 17}, o, 3);
  int64_t T = inside.seq_len, n = alone.seq_len;
  EXPECT_EQ(std::vector<int64_t>(alone.input_ids.begin(), alone.input_ids.end()),
            std::vector<int64_t>(inside.input_ids.begin() + T, inside.input_ids.begin() + T + n));
  EXPECT_EQ(std::vector<int64_t>(alone.labels.begin(), alone.labels.end()),
            std::vector<int64_t>(inside.labels.begin() + T, inside.labels.begin() + T + n));
  // Another epoch or seed masks differently.
  Batch next_epoch = collate(f, {45}, o, 4);
  EXPECT_NE(alone.labels, next_epoch.labels);
  o.seed = 8;
  EXPECT_NE(alone.labels, collate(f, {45}, o, 3).labels);
}
