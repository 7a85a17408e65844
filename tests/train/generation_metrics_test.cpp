// ROUGE and BLEU against rouge_score and sacrebleu on fixed strings
// (tests/goldens/generation_metrics.json, tests/goldens/gen_generation_metrics.py).
#include "kiln/train/generation_metrics.h"

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/train/porter_stemmer.h"

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
    for (const bool stem : {false, true}) {
      const RougeScores r = rouge(hyps, refs[0], stem);
      const auto& want = c[stem ? "rouge_stemmed" : "rouge"];
      EXPECT_NEAR(r.rouge1, want["rouge1"].get<double>(), 1e-12) << stem << c.dump();
      EXPECT_NEAR(r.rouge2, want["rouge2"].get<double>(), 1e-12) << stem << c.dump();
      EXPECT_NEAR(r.rougeL, want["rougeL"].get<double>(), 1e-12) << stem << c.dump();
      EXPECT_NEAR(r.rougeLsum, want["rougeLsum"].get<double>(), 1e-12) << stem << c.dump();
    }
  }
  // sacrebleu's README: BLEU = 48.53.
  EXPECT_NEAR(goldens()["cases"][0]["bleu"].get<double>(), 48.53, 0.005);
}

TEST(GenerationMetrics, PorterStemsAsNltk) {
  ASSERT_GE(goldens()["porter"].size(), 90u);
  for (const auto& w : goldens()["porter"])
    EXPECT_EQ(porter_stem(w["word"].get<std::string>()), w["stem"].get<std::string>()) << w.dump();
}

// Summary-level LCS by hand: reference sentences "a b c" and "d e", prediction lines "a c" and "e d b":
// the union LCS of "a b c" with the lines is {a, c} + {b}; of "d e" {e} (or {d}): 4 hits of 5 / 5 tokens.
TEST(GenerationMetrics, RougeLsumUnionLcsByHand) {
  const RougeScores r = rouge({"a c\ne d b"}, {"a b c\nd e"});
  EXPECT_NEAR(r.rougeLsum, 0.8, 1e-12);
  EXPECT_NEAR(rouge({"a b c d e"}, {"a b c\n\nd e"}).rougeLsum, 1.0, 1e-12);  // empty lines are no sentences
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
