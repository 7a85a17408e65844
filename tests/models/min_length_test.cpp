// min_new_tokens and min_length: the token ids transformers 5.25's generate()
// returns (tests/goldens/min_length.json, gen_min_length_goldens.py) for the
// tiny GPT-2, Llama and T5 models, greedy and with beams, with an EOS their
// greedy decoding produces early, so the minimum decides where they end.

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "models/golden_model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::golden_model;

TEST(MinLength, TokenIdsAsTransformers) {
  const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/min_length.json");
  ASSERT_GE(j["cases"].size(), 60u);
  for (const auto& c : j["cases"]) {
    models::GenerationConfig g;
    g.num_beams = c["num_beams"];
    g.max_new_tokens = 12;
    g.eos_token_ids = {c["eos_token_id"].get<int64_t>()};
    g.min_new_tokens = c["min_new_tokens"];
    if (c["min_length"].get<int64_t>() > 0) g.min_length = c["min_length"].get<int64_t>();
    const auto out = models::generate(golden_model(c["model"]), {c["prompt"].get<std::vector<int64_t>>()}, g);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], c["sequence"].get<std::vector<int64_t>>())
        << c["model"] << ", num_beams " << g.num_beams << ", min_new_tokens " << g.min_new_tokens << ", min_length "
        << c["min_length"];
  }
}

TEST(MinLength, NegativeSettingsAreErrors) {
  models::GenerationConfig g;
  g.min_new_tokens = -1;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, g); }),
                  "min_new_tokens must be >= 0, got -1");
  g = models::GenerationConfig{};
  g.min_length = -2;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("t5/t5_relu_tied"), {{5, 1}}, g); }),
                  "min_length must be >= 0, got -2");
}

}  // namespace
}  // namespace kiln
