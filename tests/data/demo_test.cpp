// The demo data set: deterministic, balanced, disjoint splits, and a
// vocabulary that the BERT tokenizer loads and that leaves nothing unknown.
#include <gtest/gtest.h>

#include <set>

#include "data/util.h"
#include "kiln/data/demo.h"
#include "kiln/data/features.h"
#include "kiln/core/atomic_file.h"

using namespace kiln::data;
using kiln::testing::TempDir;

TEST(DemoDataTest, WritesBalancedDisjointDeterministicSplits) {
  TempDir a, b, c;
  demo::write_demo_dataset(a.path(), 0);
  demo::write_demo_dataset(b.path(), 0);
  demo::write_demo_dataset(c.path(), 1);
  for (const char* name : {"train.csv", "validation.csv", "test.txt", "vocab.txt", "tokenizer_config.json"})
    EXPECT_EQ(kiln::read_file(a.path() / name), kiln::read_file(b.path() / name)) << name;
  EXPECT_NE(kiln::read_file(a.path() / "train.csv"), kiln::read_file(c.path() / "train.csv"));

  Dataset train = load_dataset(a.path() / "train.csv");
  Dataset validation = load_dataset(a.path() / "validation.csv");
  Dataset test = load_dataset(a.path() / "test.txt");
  EXPECT_EQ(train.rows.size(), 3000u);
  EXPECT_EQ(validation.rows.size(), 600u);
  EXPECT_EQ(test.rows.size(), 10u);
  EXPECT_FALSE(test.has_labels);
  for (const Dataset* ds : {&train, &validation}) {
    size_t positive = 0;
    for (const auto& r : ds->rows) {
      EXPECT_TRUE(r.label == "positive" || r.label == "negative") << r.label;
      positive += r.label == "positive";
    }
    EXPECT_EQ(positive * 2, ds->rows.size()) << ds->source;
  }
  std::set<std::string> seen;
  for (const auto& r : train.rows) EXPECT_TRUE(seen.insert(r.text).second) << "duplicate: " << r.text;
  for (const auto* ds : {&validation, &test})
    for (const auto& r : ds->rows) EXPECT_TRUE(seen.insert(r.text).second) << "in two splits: " << r.text;

  LabelMap labels = LabelMap::from_dataset(train);
  EXPECT_EQ(labels.labels, (std::vector<std::string>{"negative", "positive"}));
}

TEST(DemoDataTest, LabelDependsOnMoreThanOneWord) {
  // Negations, "could (not) be better" and "but" clauses: the same adjective
  // or verb appears under both labels.
  auto reviews = demo::generate_reviews(2000, 0);
  std::map<std::string, std::set<std::string>> labels_of_word;
  size_t negated = 0, contrast = 0;
  for (const auto& r : reviews) {
    std::string w;
    for (char ch : r.sentence + " ") {
      if (std::isalpha(static_cast<unsigned char>(ch))) {
        w += ch;
      } else if (!w.empty()) {
        labels_of_word[w].insert(r.label);
        w.clear();
      }
    }
    negated += r.sentence.find("not ") != std::string::npos || r.sentence.find("n't ") != std::string::npos;
    contrast += r.sentence.find(" but ") != std::string::npos || r.sentence.find("though ") != std::string::npos;
  }
  for (const char* w : {"great", "terrible", "recommend", "love", "hate", "better", "bad"})
    EXPECT_EQ(labels_of_word[w].size(), 2u) << w;
  EXPECT_GT(negated, reviews.size() / 5);
  EXPECT_GT(contrast, reviews.size() / 5);
}

TEST(DemoDataTest, TokenizerLoadsVocabAndLeavesNothingUnknown) {
  TempDir d;
  demo::write_demo_dataset(d.path(), 0);
  auto tok = kiln::tokenizers::Tokenizer::from_pretrained(d.path().string());
  EXPECT_EQ(tok.token_to_id("[PAD]"), 0u);
  EXPECT_EQ(tok.token_to_id("[UNK]"), 1u);
  EXPECT_EQ(tok.token_to_id("[CLS]"), 2u);
  EXPECT_EQ(tok.token_to_id("[SEP]"), 3u);
  EXPECT_EQ(tok.token_to_id("[MASK]"), 4u);
  ASSERT_TRUE(tok.model_max_length.has_value());
  EXPECT_EQ(*tok.model_max_length, 64u);
  size_t longest = 0;
  for (const char* split : {"train.csv", "validation.csv", "test.txt"}) {
    Dataset ds = load_dataset(d.path() / split);
    Features f = tokenize_dataset(ds, tok, 64, nullptr);
    for (const auto& ids : f.input_ids) {
      EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 0) << split;
      longest = std::max(longest, ids.size());
    }
  }
  EXPECT_LT(longest, 64u);  // nothing truncated at model_max_length
  // New text in upper case with digits and words outside the lists: word pieces, no [UNK].
  auto enc = tok.encode("The Zyxwv 3000 is GREAT, not bad!");
  EXPECT_EQ(std::count(enc.ids.begin(), enc.ids.end(), 1u), 0);
  EXPECT_EQ(tok.encode("the battery is not bad").tokens,
            (std::vector<std::string>{"[CLS]", "the", "battery", "is", "not", "bad", "[SEP]"}));
}
