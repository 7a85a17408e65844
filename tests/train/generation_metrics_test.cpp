// ROUGE and BLEU against rouge_score and sacrebleu on fixed strings
// (tests/goldens/generation_metrics.json, tests/goldens/gen_generation_metrics.py).
#include "kiln/train/generation_metrics.h"

#include <gtest/gtest.h>

#include "kiln/core/json.h"

namespace kiln::train {
namespace {

const nlohmann::json& goldens() {
  static const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/generation_metrics.json");
  return j;
}

TEST(GenerationMetrics, BleuAndRougeAsTheReferencePackages) {
  for (const auto& c : goldens()["cases"]) {
    const auto hyps = c["hypotheses"].get<std::vector<std::string>>();
    const auto refs = c["references"].get<std::vector<std::vector<std::string>>>();
    EXPECT_NEAR(corpus_bleu(hyps, refs), c["bleu"].get<double>(), 1e-9) << c.dump();
    const RougeScores r = rouge(hyps, refs[0]);
    EXPECT_NEAR(r.rouge1, c["rouge"]["rouge1"].get<double>(), 1e-12) << c.dump();
    EXPECT_NEAR(r.rouge2, c["rouge"]["rouge2"].get<double>(), 1e-12) << c.dump();
    EXPECT_NEAR(r.rougeL, c["rouge"]["rougeL"].get<double>(), 1e-12) << c.dump();
  }
  // sacrebleu's README: BLEU = 48.53.
  EXPECT_NEAR(goldens()["cases"][0]["bleu"].get<double>(), 48.53, 0.005);
}

TEST(GenerationMetrics, Tokenize13aAsSacrebleu) {
  for (const auto& t : goldens()["tokenize_13a"])
    EXPECT_EQ(tokenize_13a(t["line"].get<std::string>()), t["tokens"].get<std::string>()) << t.dump();
}

TEST(GenerationMetrics, RougeTokensAndLcsByHand) {
  EXPECT_EQ(rouge_tokens("The quick-brown FOX, 3.5!"),
            (std::vector<std::string>{"the", "quick", "brown", "fox", "3", "5"}));
  // rouge_score's README pair: 6 of 8 / 9 unigrams, an LCS of 5.
  const RougeScores r = rouge({"The quick brown dog jumps on the log."}, {"The quick brown fox jumps over the lazy dog"});
  EXPECT_NEAR(r.rouge1, 2 * (6.0 / 8) * (6.0 / 9) / (6.0 / 8 + 6.0 / 9), 1e-12);
  EXPECT_NEAR(r.rougeL, 2 * (5.0 / 8) * (5.0 / 9) / (5.0 / 8 + 5.0 / 9), 1e-12);
  EXPECT_THROW(rouge({"a"}, {}), Error);
}

}  // namespace
}  // namespace kiln::train
