// LabelMap: run_glue's label_list ordering, regression detection, unseen labels.
#include <gtest/gtest.h>

#include "data/util.h"
#include "kiln/data/labels.h"

using namespace kiln::data;
using kiln::testing::error_of;

namespace {
Dataset labeled(std::vector<std::string> labels) {
  Dataset ds;
  ds.source = "train.csv";
  ds.has_labels = true;
  for (auto& l : labels) ds.rows.push_back({"t", "", std::move(l)});
  return ds;
}
}  // namespace

TEST(LabelMapTest, StringsSortLexicographically) {
  LabelMap m = LabelMap::from_dataset(labeled({"positive", "negative", "neutral", "negative", "Zebra"}));
  EXPECT_FALSE(m.is_regression);
  EXPECT_EQ(m.labels, (std::vector<std::string>{"Zebra", "negative", "neutral", "positive"}));  // byte order
  EXPECT_EQ(m.id("neutral", "x"), 2);
}

TEST(LabelMapTest, IntegersSortNumerically) {
  LabelMap m = LabelMap::from_dataset(labeled({"10", "2", "-1", "2", "0"}));
  EXPECT_FALSE(m.is_regression);
  EXPECT_EQ(m.labels, (std::vector<std::string>{"-1", "0", "2", "10"}));
  EXPECT_EQ(m.id("10", "x"), 3);
  // Mixed integers and words: plain string order.
  LabelMap s = LabelMap::from_dataset(labeled({"10", "2", "other"}));
  EXPECT_EQ(s.labels, (std::vector<std::string>{"10", "2", "other"}));
}

TEST(LabelMapTest, NonIntegerNumbersMeanRegression) {
  LabelMap m = LabelMap::from_dataset(labeled({"3.5", "1", "0.25", "4e-1"}));
  EXPECT_TRUE(m.is_regression);
  EXPECT_TRUE(m.labels.empty());
  EXPECT_CONTAINS(error_of([&] { m.id("3.5", "row 1"); }), "regression");
  LabelMap f = LabelMap::from_dataset(labeled({"1.0", "2.0"}));  // pandas reads these as float: regression
  EXPECT_TRUE(f.is_regression);
  LabelMap nan = LabelMap::from_dataset(labeled({"0.5", "nan"}));  // not finite: not a number here
  EXPECT_FALSE(nan.is_regression);
}

TEST(LabelMapTest, UnseenLabelNamesItAndTheKnownOnes) {
  LabelMap m = LabelMap::from_dataset(labeled({"b", "a"}));
  EXPECT_EQ(error_of([&] { m.id("c", "validation.csv row 3"); }),
            "validation.csv row 3: label 'c' was not seen in training (known labels: 'a', 'b')");
}

TEST(LabelMapTest, FromLabelsAndErrors) {
  LabelMap m = LabelMap::from_labels({"neg", "pos"});
  EXPECT_EQ(m.id("pos", "x"), 1);
  EXPECT_CONTAINS(error_of([] { LabelMap::from_labels({"a", "a"}); }), "label 'a' appears twice");
  Dataset unlabeled;
  unlabeled.source = "t.txt";
  unlabeled.rows.push_back({"t", "", ""});
  EXPECT_EQ(error_of([&] { LabelMap::from_dataset(unlabeled); }),
            "t.txt: no labels (a training set needs a label column)");
}
