// tokenize_words against run_ner.py's tokenize_and_align_labels
// (tests/goldens/ner/cases.json, gen_ner_goldens.py): the input ids and the
// labels of every training row, for a WordPiece BERT whose names split into
// several pieces and a byte-level RoBERTa (each word with its leading space),
// with and without label_all_tokens (B- made I- on later pieces) and
// truncation; and LabelMap::in_model_order, run_ner's use of a checkpoint's
// tag order.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/data/features.h"
#include "kiln/data/labels.h"
#include "kiln/tokenizers/tokenizer.h"

namespace kiln::data {
namespace {

using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/ner";

class NerFeaturesGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(NerFeaturesGolden, AlignsLabelsAsRunNer) {
  const json c = read_json_file(kDir + "/cases.json").at(GetParam());
  const auto tok = tokenizers::Tokenizer::from_pretrained(kDir + "/" + c.at("model").get<std::string>());
  DatasetOptions o;
  o.split_into_words = true;
  const Dataset ds = load_dataset(kDir + "/data/train.jsonl", o);
  const LabelMap labels = LabelMap::from_labels(c.at("labels").get<std::vector<std::string>>());
  const Features f = tokenize_words(ds, tok, c.value("max_seq_length", int64_t{0}), &labels,
                                    c.value("label_all_tokens", false));
  const json& hf = c.at("train_features");
  ASSERT_EQ(f.size(), hf.size());
  for (size_t r = 0; r < f.size(); ++r) {
    EXPECT_EQ(f.input_ids[r], hf[r].at("input_ids").get<std::vector<int64_t>>()) << "row " << r;
    EXPECT_EQ(f.token_labels[r], hf[r].at("labels").get<std::vector<int64_t>>()) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, NerFeaturesGolden,
                         ::testing::Values("bert", "bert_label_all_tokens", "bert_truncated", "bert_tagged_checkpoint",
                                           "roberta", "roberta_label_all_tokens_truncated"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(LabelMapInModelOrder, FollowsACheckpointThatNamesTheSameTags) {
  const LabelMap sorted = LabelMap::from_labels({"B-PER", "I-PER", "O"});
  auto ordered = sorted.in_model_order({{0, "O"}, {1, "B-PER"}, {2, "I-PER"}});
  ASSERT_TRUE(ordered);
  EXPECT_EQ(ordered->labels, (std::vector<std::string>{"O", "B-PER", "I-PER"}));
  // HF's default names, another count, another set, or ids with a gap: the data's own order.
  EXPECT_FALSE(sorted.in_model_order({{0, "LABEL_0"}, {1, "LABEL_1"}, {2, "LABEL_2"}}));
  EXPECT_FALSE(sorted.in_model_order({{0, "O"}, {1, "B-PER"}}));
  EXPECT_FALSE(sorted.in_model_order({{0, "O"}, {1, "B-PER"}, {2, "B-LOC"}}));
  EXPECT_FALSE(sorted.in_model_order({{0, "O"}, {1, "B-PER"}, {3, "I-PER"}}));
  EXPECT_FALSE(sorted.in_model_order({{0, "O"}, {1, "O"}, {2, "I-PER"}}));
  EXPECT_FALSE(has_named_labels({{0, "LABEL_0"}, {1, "LABEL_1"}}));
  EXPECT_TRUE(has_named_labels({{0, "LABEL_0"}, {1, "B-PER"}}));
}

}  // namespace
}  // namespace kiln::data
