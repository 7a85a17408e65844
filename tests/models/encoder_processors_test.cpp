// encoder_repetition_penalty and encoder_no_repeat_ngram_size: what
// transformers 5.25's EncoderRepetitionPenaltyLogitsProcessor and
// EncoderNoRepeatNGramLogitsProcessor do to crafted rows, and the ids its
// generate() returns with them on the tiny GPT-2, Llama and T5 models, greedy
// and with beams (tests/goldens/encoder_processors.json,
// gen_encoder_processors_goldens.py).
#include <cmath>
#include <limits>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "models/golden_model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::golden_model;

const nlohmann::json& goldens() {
  static const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/encoder_processors.json");
  return j;
}

void apply_settings(const nlohmann::json& s, models::GenerationConfig& g) {
  g.encoder_repetition_penalty = s.value("encoder_repetition_penalty", 1.0);
  g.encoder_no_repeat_ngram_size = s.value("encoder_no_repeat_ngram_size", int64_t{0});
  g.repetition_penalty = s.value("repetition_penalty", 1.0);
  g.no_repeat_ngram_size = s.value("no_repeat_ngram_size", int64_t{0});
}

TEST(EncoderProcessors, RowsAsTransformers) {
  ASSERT_GE(goldens()["rows"].size(), 40u);
  for (const auto& row : goldens()["rows"]) {
    models::GenerationConfig g;
    apply_settings(row, g);
    std::vector<float> scores = row["scores_in"].get<std::vector<float>>();
    const auto ids = row["ids"].get<std::vector<int64_t>>();
    const auto encoder = row["encoder_ids"].get<std::vector<int64_t>>();
    const std::vector<int64_t> eos;
    models::apply_logits_processors(scores, {ids, static_cast<int64_t>(ids.size()) - 1, eos, &encoder}, g);
    ASSERT_EQ(scores.size(), row["scores"].size());
    for (size_t i = 0; i < scores.size(); ++i) {
      const auto& want = row["scores"][i];
      if (want.is_string())
        EXPECT_EQ(scores[i], -std::numeric_limits<float>::infinity()) << row.dump() << " at " << i;
      else
        EXPECT_EQ(scores[i], want.get<float>()) << row.dump() << " at " << i;
    }
  }
}

// A decoder-only model's prompt is what the encoder processors read.
TEST(EncoderProcessors, DecoderOnlyPromptIsTheEncoderInput) {
  models::GenerationConfig g;
  g.encoder_no_repeat_ngram_size = 2;
  std::vector<float> scores(10, 1.0f);
  const std::vector<int64_t> ids = {3, 4, 3, 5, 7, 3}, eos;
  models::apply_logits_processors(scores, {ids, 2, eos}, g);  // prompt 3 4 3 5: after 3 come 4 and 5
  for (int64_t id = 0; id < 10; ++id)
    EXPECT_EQ(std::isinf(scores[static_cast<size_t>(id)]), id == 4 || id == 5) << id;
}

TEST(EncoderProcessors, GenerateAsTransformers) {
  int changed = 0;
  for (const auto& c : goldens()["cases"]) {
    models::GenerationConfig g;
    g.max_new_tokens = 12;
    g.num_beams = c["num_beams"];
    apply_settings(c["settings"], g);
    const auto out = models::generate(golden_model(c["model"]), {c["prompt"].get<std::vector<int64_t>>()}, g);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], c["sequence"].get<std::vector<int64_t>>())
        << c["model"] << ", num_beams " << g.num_beams << ", " << c["settings"].dump();
    changed += c["sequence"] != c["baseline"];
  }
  EXPECT_GE(changed, 20);
}

TEST(EncoderProcessors, BadSettingsAreErrors) {
  models::GenerationConfig g;
  g.encoder_repetition_penalty = 0;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, g); }),
                  "encoder_repetition_penalty must be a positive number, got 0");
  g = models::GenerationConfig{};
  g.encoder_no_repeat_ngram_size = -1;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("t5/t5_relu_tied"), {{5, 1}}, g); }),
                  "encoder_no_repeat_ngram_size must be >= 0 (0 = off), got -1");
}

}  // namespace
}  // namespace kiln
