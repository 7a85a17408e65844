// guidance_scale: the ids transformers 5.25's generate() returns with
// UnbatchedClassifierFreeGuidanceLogitsProcessor on the tiny GPT-2 and Llama
// models, greedy and with beams (tests/goldens/guidance.json,
// gen_guidance_goldens.py); an encoder-decoder is refused.
#include <limits>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "models/golden_model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::golden_model;

TEST(Guidance, GenerateAsTransformers) {
  const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/guidance.json");
  ASSERT_GE(j["cases"].size(), 32u);
  int changed = 0;
  for (const auto& c : j["cases"]) {
    models::GenerationConfig g;
    g.max_new_tokens = 10;
    g.num_beams = c["num_beams"];
    g.guidance_scale = c["settings"]["guidance_scale"];
    g.repetition_penalty = c["settings"].value("repetition_penalty", 1.0);
    for (bool cache : {true, false}) {
      g.use_cache = cache;
      const auto out = models::generate(golden_model(c["model"]), {c["prompt"].get<std::vector<int64_t>>()}, g);
      ASSERT_EQ(out.size(), 1u);
      EXPECT_EQ(out[0], c["sequence"].get<std::vector<int64_t>>())
          << c["model"] << ", prompt " << c["prompt"] << ", num_beams " << g.num_beams << ", "
          << c["settings"].dump() << ", use_cache " << cache;
    }
    changed += c["sequence"] != c["baseline"];
  }
  EXPECT_GE(changed, 20);
}

TEST(Guidance, EncoderDecoderAndBadScaleAreErrors) {
  models::GenerationConfig g;
  g.guidance_scale = 1.5;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("t5/t5_relu_tied"), {{5, 1}}, g); }),
                  "guidance_scale 1.5 needs a decoder-only model");
  g.guidance_scale = std::numeric_limits<double>::quiet_NaN();
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("gpt2/gpt2_lm"), {{5, 1}}, g); }),
                  "guidance_scale must be a finite number");
}

}  // namespace
}  // namespace kiln
