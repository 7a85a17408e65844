// kiln train --task question-answering against transformers' run_qa.py
// (tests/goldens/qa/, gen_qa_goldens.py): five AdamW steps on one batch of
// every training window, then evaluation with run_qa's post-processing
// (n_best_size 5, max_answer_length 6) and evaluate's squad (v1) or squad_v2
// (v2, --version_2_with_negative): each step's loss and gradient norm, the
// metrics, eval_predictions.json, the n-best texts and probabilities and the
// null odds.
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "support/golden_command.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/qa";

class QaGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(QaGolden, MatchesRunQa) {
  const json c = read_json_file(kDir + "/cases.json").at(GetParam());
  testing::TempDir d;
  const fs::path out = d.path() / "out";
  ASSERT_NO_FATAL_FAILURE(testing::train_golden_case(c, kDir, out));

  const json got = read_json_file(out / "eval_results.json");
  for (const auto& [key, hf] : c.at("metrics").items())  // percentages of counts: exact
    EXPECT_NEAR(got.at("eval_" + key).get<double>(), hf.get<double>(), 1e-9) << key;
  EXPECT_EQ(read_json_file(out / "eval_predictions.json"), c.at("predictions"));
  const json nbest = read_json_file(out / "eval_nbest_predictions.json");
  for (const auto& [id, hf] : c.at("nbest").items()) {
    ASSERT_EQ(nbest.at(id).size(), hf.size()) << id;
    for (size_t k = 0; k < hf.size(); ++k) {
      EXPECT_EQ(nbest.at(id)[k].at("text"), hf[k].at("text")) << id << " " << k;
      EXPECT_NEAR(nbest.at(id)[k].at("probability").get<double>(), hf[k].at("probability").get<double>(), 1e-5)
          << id << " " << k;
    }
  }
  if (!c.at("null_odds").empty()) {
    const json odds = read_json_file(out / "eval_null_odds.json");
    for (const auto& [id, hf] : c.at("null_odds").items())
      EXPECT_NEAR(odds.at(id).get<double>(), hf.get<double>(), 1e-4) << id;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, QaGolden, ::testing::Values("v1", "v2", "v1_tokenizer_max_length"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kiln
