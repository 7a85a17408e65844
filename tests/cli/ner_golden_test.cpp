// kiln train --task token-classification against transformers' run_ner.py
// (tests/goldens/ner/, gen_ner_goldens.py): five AdamW steps on one batch of
// every row, then evaluation and prediction on the dev set, for a WordPiece
// BERT and a byte-level RoBERTa, with and without --label_all_tokens and
// truncation (--max_seq_length, or the tokenizer's model_max_length), a
// checkpoint whose id2label orders the tags its own way, and
// --return_entity_level_metrics (each entity type's scores).
// Compared: each step's loss and gradient norm, seqeval's scores and the loss
// (eval_* and predict_*), predictions.txt and config.json's labels.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "support/golden_command.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/ner";

const json& cases() {
  static const json j = read_json_file(kDir + "/cases.json");
  return j;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream f(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) out.push_back(line);
  return out;
}

class NerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(NerGolden, MatchesRunNer) {
  const json& c = cases().at(GetParam());
  testing::TempDir d;
  const fs::path out = d.path() / "out";
  ASSERT_NO_FATAL_FAILURE(testing::train_golden_case(c, kDir, out));

  // seqeval's scores are ratios of counts: exact, unless a prediction flips (it would change the count).
  json got = read_json_file(out / "eval_results.json");
  got.update(read_json_file(out / "predict_results.json"));
  for (const auto& [key, hf] : c.at("metrics").items()) {
    ASSERT_TRUE(got.contains(key)) << key;
    const double tolerance = key.find("loss") != std::string::npos ? 1e-5 * hf.get<double>() : 1e-12;
    EXPECT_NEAR(got.at(key).get<double>(), hf.get<double>(), tolerance) << key;
  }
  EXPECT_EQ(lines_of(out / "predictions.txt"), c.at("predictions").get<std::vector<std::string>>());

  const json config = read_json_file(out / "config.json");
  const auto labels = c.at("labels").get<std::vector<std::string>>();
  for (size_t i = 0; i < labels.size(); ++i) {
    EXPECT_EQ(config.at("id2label").at(std::to_string(i)), labels[i]) << i;
    EXPECT_EQ(config.at("label2id").at(labels[i]), static_cast<int64_t>(i)) << labels[i];
  }
}

const std::vector<std::string> kCases = {"bert",
                                         "bert_label_all_tokens",
                                         "bert_truncated",
                                         "bert_tagged_checkpoint",
                                         "bert_tagged_entity_level",
                                         "bert_tokenizer_max_length",
                                         "roberta",
                                         "roberta_label_all_tokens_truncated"};

INSTANTIATE_TEST_SUITE_P(Cases, NerGolden, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(NerGoldenFile, EveryCaseIsTested) {
  std::set<std::string> names;
  for (const auto& [name, c] : cases().items()) names.insert(name);
  EXPECT_EQ(names, std::set<std::string>(kCases.begin(), kCases.end()));
}

// A checkpoint that names other tags than the training file's is not followed, and kiln says so.
TEST(NerGoldenFile, CheckpointWithOtherTagsIsNamedAndIgnored) {
  testing::TempDir d;
  fs::copy(kDir + "/bert_tagged", d.path() / "model");
  json config = read_json_file(d.path() / "model/config.json");
  config["id2label"]["0"] = "B-MISC";
  std::ofstream(d.path() / "model/config.json") << config.dump(2);
  json flags = cases().at("bert").at("flags");
  for (auto& f : flags)
    if (f == "{dir}/bert") f = (d.path() / "model").string();
  const fs::path out = d.path() / "out";
  const testing::KilnRun r = testing::run_kiln(testing::golden_train_command(flags, kDir, out), d.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("is not the training file's tag set"), std::string::npos) << r.output;
  EXPECT_EQ(read_json_file(out / "config.json").at("id2label").at("0"), "B-LOC");  // sorted
}

// run_ner's own flag names run as they are: --text_column_name, --label_column_name, and --task_name, whose
// tags are the column "<task_name>_tags".
TEST(NerGoldenFile, RunNersColumnFlags) {
  testing::TempDir d;
  json flags = cases().at("bert").at("flags");
  for (const char* f : {"--text_column_name", "tokens", "--label_column_name", "ner_tags", "--task_name", "ner"})
    flags.push_back(f);
  testing::KilnRun r = testing::run_kiln(testing::golden_train_command(flags, kDir, d.path() / "a"), d.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(d.path() / "a/eval_results.json").at("eval_f1"),
            cases().at("bert").at("metrics").at("eval_f1"));
  flags = cases().at("bert").at("flags");
  for (const char* f : {"--task_name", "pos"}) flags.push_back(f);
  r = testing::run_kiln(testing::golden_train_command(flags, kDir, d.path() / "b"), d.path());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("pos_tags"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kiln
