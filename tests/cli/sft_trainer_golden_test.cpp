// kiln train --task sft against TRL's SFTTrainer (tests/goldens/sft_trainer/,
// gen_sft_trainer_goldens.py, trl 1.16): two AdamW steps on one batch of
// every prepared row, for conversational and prompt-completion data with
// assistant-only and completion-only losses, truncation and the three packing
// strategies (bfd trains padding-free in TRL: each example attends to itself
// alone and its positions restart). Each step's loss and gradient norm.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "support/golden_command.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/sft_trainer";

const json& cases() {
  static const json j = read_json_file(kDir + "/cases.json");
  return j;
}

TEST(SftTrainerGolden, LossesAndGradientNormsAreTrls) {
  ASSERT_GE(cases().size(), 10u);
  for (const auto& [name, c] : cases().items()) {
    SCOPED_TRACE(name);
    testing::TempDir d;
    const fs::path out = d.path() / "out";
    ASSERT_NO_FATAL_FAILURE(testing::train_golden_case(c, kDir, out));
  }
}

}  // namespace
}  // namespace kiln
