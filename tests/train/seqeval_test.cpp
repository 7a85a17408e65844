// seqeval's entity extraction and scores, on the examples of its README and
// on the conlleval rules for IOB1, IOB2 and IOBES.
#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include "kiln/train/seqeval.h"

namespace kiln::train {
namespace {

using Entities = std::vector<std::tuple<std::string, int64_t, int64_t>>;

TEST(Seqeval, GetEntities) {
  EXPECT_EQ(get_entities({"B-PER", "I-PER", "O", "B-LOC"}), (Entities{{"PER", 0, 1}, {"LOC", 3, 3}}));
  // IOB1: I- starts a chunk after O; a type change ends one.
  EXPECT_EQ(get_entities({"I-PER", "I-PER", "O", "I-LOC", "I-ORG"}),
            (Entities{{"PER", 0, 1}, {"LOC", 3, 3}, {"ORG", 4, 4}}));
  EXPECT_EQ(get_entities({"B-PER", "B-PER", "I-PER"}), (Entities{{"PER", 0, 0}, {"PER", 1, 2}}));
  // IOBES.
  EXPECT_EQ(get_entities({"S-LOC", "B-PER", "E-PER", "O", "S-ORG"}),
            (Entities{{"LOC", 0, 0}, {"PER", 1, 2}, {"ORG", 4, 4}}));
  // A type with a dash, and tags without one.
  EXPECT_EQ(get_entities({"B-MISC-X", "I-MISC-X"}), (Entities{{"MISC-X", 0, 1}}));
  EXPECT_TRUE(get_entities({"O", "O"}).empty());
  EXPECT_TRUE(get_entities({}).empty());
}

TEST(Seqeval, ScoresAsTheReadmeExample) {
  // seqeval's README: f1 0.50, accuracy 0.80.
  const std::vector<std::vector<std::string>> y_true = {{"O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"},
                                                        {"B-PER", "I-PER", "O"}};
  const std::vector<std::vector<std::string>> y_pred = {{"O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"},
                                                        {"B-PER", "I-PER", "O"}};
  SeqevalScores s = seqeval(y_true, y_pred);
  EXPECT_DOUBLE_EQ(s.precision, 0.5);
  EXPECT_DOUBLE_EQ(s.recall, 0.5);
  EXPECT_DOUBLE_EQ(s.f1, 0.5);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.8);
  // classification_report's rows (run_ner's --return_entity_level_metrics): MISC missed, PER found.
  ASSERT_EQ(s.types.size(), 2u);
  EXPECT_EQ(s.types.at("MISC").precision, 0.0);
  EXPECT_EQ(s.types.at("MISC").f1, 0.0);
  EXPECT_EQ(s.types.at("MISC").number, 1);
  EXPECT_DOUBLE_EQ(s.types.at("PER").f1, 1.0);
  EXPECT_EQ(s.types.at("PER").number, 1);
  // A type only predicted has no reference entity: recall 0, number 0.
  s = seqeval({{"O", "O"}}, {{"B-LOC", "O"}});
  EXPECT_EQ(s.types.at("LOC").number, 0);
  EXPECT_EQ(s.types.at("LOC").recall, 0.0);
  // Sentences do not run into each other: an entity at the end of one and the start of the next stays two.
  s = seqeval({{"O", "B-PER"}, {"I-PER", "O"}}, {{"O", "B-PER"}, {"I-PER", "O"}});
  EXPECT_DOUBLE_EQ(s.f1, 1.0);
  // No entities predicted (or none at all): 0, as seqeval's zero_division.
  s = seqeval({{"B-PER", "O"}}, {{"O", "O"}});
  EXPECT_EQ(s.precision, 0.0);
  EXPECT_EQ(s.recall, 0.0);
  EXPECT_EQ(s.f1, 0.0);
  EXPECT_DOUBLE_EQ(s.accuracy, 0.5);
  EXPECT_THROW(seqeval({{"O"}}, {{"O", "O"}}), Error);
  EXPECT_THROW(seqeval({{"O"}}, {}), Error);
}

}  // namespace
}  // namespace kiln::train
