// kiln train --task multiple-choice against transformers' run_swag.py
// (tests/goldens/swag/, gen_swag_goldens.py): five AdamW steps on one batch of
// every row, with and without truncation, then eval_loss and eval_accuracy.
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "support/golden_command.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/swag";

class SwagGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(SwagGolden, MatchesRunSwag) {
  const json c = read_json_file(kDir + "/cases.json").at(GetParam());
  testing::TempDir d;
  const fs::path out = d.path() / "out";
  ASSERT_NO_FATAL_FAILURE(testing::train_golden_case(c, kDir, out));
  const json got = read_json_file(out / "eval_results.json");
  EXPECT_NEAR(got.at("eval_loss").get<double>(), c.at("metrics").at("eval_loss").get<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(got.at("eval_accuracy").get<double>(), c.at("metrics").at("eval_accuracy").get<double>());
}

INSTANTIATE_TEST_SUITE_P(Cases, SwagGolden, ::testing::Values("full", "truncated"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kiln
