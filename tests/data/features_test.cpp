// tokenize_dataset (pairs, truncation, labels) and group_texts on a tiny
// WordPiece vocabulary written by the test.
#include <gtest/gtest.h>

#include "data/util.h"
#include "kiln/data/features.h"

using namespace kiln::data;
using kiln::testing::error_of;
using kiln::testing::TempDir;

namespace {
// ids: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4 the=5 cat=6 sat=7 on=8 mat=9 a=10 dog=11 ran=12 .=13 ##s=14
const char* kVocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\na\ndog\nran\n.\n##s\n";

kiln::tokenizers::Tokenizer tiny_tokenizer(const TempDir& d) {
  d.write("vocab.txt", kVocab);
  d.write("tokenizer_config.json", "{\"do_lower_case\": true}");
  return kiln::tokenizers::Tokenizer::from_pretrained(d.path().string());
}

Dataset make(std::vector<Example> rows, bool labeled) {
  Dataset ds;
  ds.source = "mem.csv";
  ds.rows = std::move(rows);
  ds.has_labels = labeled;
  return ds;
}
}  // namespace

TEST(TokenizeDatasetTest, SinglesWithSpecialTokensAndLabels) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  Dataset ds = make({{"The cat sat.", "", "pos"}, {"a dog", "", "neg"}, {"cats zebra", "", "pos"}}, true);
  LabelMap labels = LabelMap::from_dataset(ds);
  Features f = tokenize_dataset(ds, tok, 128, &labels);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f.input_ids[0], (std::vector<int64_t>{2, 5, 6, 7, 13, 3}));
  EXPECT_EQ(f.input_ids[1], (std::vector<int64_t>{2, 10, 11, 3}));
  EXPECT_EQ(f.input_ids[2], (std::vector<int64_t>{2, 6, 14, 1, 3}));  // cat ##s [UNK]
  EXPECT_EQ(f.token_type_ids[0], std::vector<int64_t>(6, 0));
  EXPECT_EQ(f.labels, (std::vector<int64_t>{1, 0, 1}));  // neg=0, pos=1
  EXPECT_TRUE(f.float_labels.empty());
  // No label map, or an unlabeled set: no labels.
  EXPECT_TRUE(tokenize_dataset(ds, tok, 128, nullptr).labels.empty());
}

TEST(TokenizeDatasetTest, PairsTruncateLongestFirst) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  // 6 + 2 words; max_length 8 leaves 5 for the texts: the longer one is cut to 3.
  Dataset ds = make({{"the cat sat on the mat", "a dog", ""}, {"a", "dog", ""}}, false);
  Features f = tokenize_dataset(ds, tok, 8, nullptr);
  EXPECT_EQ(f.input_ids[0], (std::vector<int64_t>{2, 5, 6, 7, 3, 10, 11, 3}));
  EXPECT_EQ(f.token_type_ids[0], (std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(f.input_ids[1], (std::vector<int64_t>{2, 10, 3, 11, 3}));
  // Single sequences are cut to max_length including [CLS]/[SEP].
  Features s = tokenize_dataset(make({{"the cat sat on the mat", "", ""}}, false), tok, 4, nullptr);
  EXPECT_EQ(s.input_ids[0], (std::vector<int64_t>{2, 5, 6, 3}));
  // The caller's tokenizer settings do not leak in (padding would lengthen rows).
  auto padded = tok;
  kiln::tokenizers::PaddingParams pad;
  pad.length = 32;
  padded.set_padding(pad);
  EXPECT_EQ(tokenize_dataset(make({{"a", "", ""}}, false), padded, 16, nullptr).input_ids[0].size(), 3u);
}

TEST(TokenizeDatasetTest, RegressionAndUnseenLabels) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  Dataset train = make({{"a", "", "0.5"}, {"dog", "", "3"}}, true);
  LabelMap reg = LabelMap::from_dataset(train);
  ASSERT_TRUE(reg.is_regression);
  Features f = tokenize_dataset(train, tok, 16, &reg);
  EXPECT_EQ(f.float_labels, (std::vector<float>{0.5f, 3.0f}));
  EXPECT_TRUE(f.labels.empty());

  LabelMap cls = LabelMap::from_labels({"neg", "pos"});
  Dataset val = make({{"a", "", "pos"}, {"dog", "", "neutral"}}, true);
  EXPECT_EQ(error_of([&] { tokenize_dataset(val, tok, 16, &cls); }),
            "mem.csv row 2: label 'neutral' was not seen in training (known labels: 'neg', 'pos')");
}

TEST(GroupTextsTest, BlocksWithAndWithoutSpecials) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  // 3 + 2 + 4 = 9 tokens without specials.
  Dataset ds = make({{"the cat sat", "", ""}, {"a dog", "", ""}, {"dog ran on mat", "", ""}}, false);
  Features plain = group_texts(ds, tok, 4, false);
  ASSERT_EQ(plain.size(), 2u);  // the last token is dropped
  EXPECT_EQ(plain.input_ids[0], (std::vector<int64_t>{5, 6, 7, 10}));
  EXPECT_EQ(plain.input_ids[1], (std::vector<int64_t>{11, 11, 12, 8}));
  Features mlm = group_texts(ds, tok, 5, true);  // 3 text tokens per block
  ASSERT_EQ(mlm.size(), 3u);
  EXPECT_EQ(mlm.input_ids[0], (std::vector<int64_t>{2, 5, 6, 7, 3}));
  EXPECT_EQ(mlm.input_ids[2], (std::vector<int64_t>{2, 12, 8, 9, 3}));
  EXPECT_EQ(mlm.token_type_ids[2], std::vector<int64_t>(5, 0));
  EXPECT_TRUE(mlm.labels.empty());
  // Shorter than one block: one short block.
  Features one = group_texts(make({{"a dog", "", ""}}, false), tok, 16, true);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one.input_ids[0], (std::vector<int64_t>{2, 10, 11, 3}));
  EXPECT_FALSE(error_of([&] { group_texts(ds, tok, 2, true); }).empty());
}

// run_ner's tokenize_and_align_labels: "cats" is two tokens (cat ##s); its
// first token takes the word's tag, the second -100 (or, with
// label_all_tokens, the tag with B- made I-); specials are -100.
TEST(TokenizeWordsTest, AlignsTagsWithTheFirstTokenOfEachWord) {
  TempDir d;
  auto tok = tiny_tokenizer(d);
  Dataset ds;
  ds.source = "mem.jsonl";
  ds.has_labels = true;
  Example e;
  e.words = {"the", "cats", "sat"};
  e.word_labels = {"O", "B-ANIMAL", "O"};
  ds.rows.push_back(e);
  const LabelMap labels = LabelMap::from_labels({"B-ANIMAL", "I-ANIMAL", "O"});
  Features f = tokenize_words(ds, tok, 0, &labels, false);
  EXPECT_EQ(f.input_ids[0], (std::vector<int64_t>{2, 5, 6, 14, 7, 3}));  // [CLS] the cat ##s sat [SEP]
  EXPECT_EQ(f.word_ids[0], (std::vector<int64_t>{-1, 0, 1, 1, 2, -1}));
  // Per-token values back to one per word: each word's first token.
  EXPECT_EQ(per_word({20, 21, 22, 23, 24, 25}, f.word_ids[0]), (std::vector<int64_t>{21, 22, 24}));
  EXPECT_EQ(f.token_labels[0], (std::vector<int64_t>{-100, 2, 0, -100, 2, -100}));
  f = tokenize_words(ds, tok, 0, &labels, true);
  EXPECT_EQ(f.token_labels[0], (std::vector<int64_t>{-100, 2, 0, 1, 2, -100}));  // ##s: I-ANIMAL
  // Truncation keeps the specials; the cut word's tags go with it.
  f = tokenize_words(ds, tok, 4, &labels, false);
  EXPECT_EQ(f.input_ids[0], (std::vector<int64_t>{2, 5, 6, 3}));
  EXPECT_EQ(f.token_labels[0], (std::vector<int64_t>{-100, 2, 0, -100}));
  // Unlabeled rows (prediction) get no tags; an unknown tag names the row.
  ds.has_labels = false;
  EXPECT_TRUE(tokenize_words(ds, tok, 0, &labels, false).token_labels.empty());
  ds.has_labels = true;
  ds.rows[0].word_labels[1] = "B-PLANT";
  EXPECT_CONTAINS(error_of([&] { tokenize_words(ds, tok, 0, &labels, false); }), "mem.jsonl row 1");
}
