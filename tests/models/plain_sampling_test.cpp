// Plain sampling (num_beams 1 with do_sample), transformers' _sample: the logits processors, then the warpers
// transformers' _get_logits_processor builds (temperature, top_k, top_p) and one draw. The warped distribution is
// checked against transformers' on rows at the warpers' boundaries (ties with the top_k-th value, ties at the
// top_p cut, a mass exactly 1 - top_p), and the outputs of generate() over many seeds against transformers' on the
// tiny GPT-2 model (tests/goldens/plain_sampling.json).
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "models/sampling_distance.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using models::GenerationConfig;

const nlohmann::json& goldens() {
  static const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/plain_sampling.json");
  return j;
}

GenerationConfig sampling(const nlohmann::json& s) {
  GenerationConfig g;
  g.do_sample = true;
  g.temperature = s["temperature"];
  g.top_k = s["top_k"];
  g.top_p = s["top_p"];
  if (s.contains("min_p") && !s["min_p"].is_null()) g.min_p = s["min_p"];
  g.repetition_penalty = s["repetition_penalty"];
  if (s.contains("no_repeat_ngram_size")) g.no_repeat_ngram_size = s["no_repeat_ngram_size"];
  return g;
}

// softmax of the processed and warped row: the distribution next_token draws from.
std::vector<double> warped(const nlohmann::json& row) {
  const GenerationConfig g = sampling(row["generate"]);
  std::vector<float> scores = row["logits"].get<std::vector<float>>();
  models::process_logits(scores, row["ids"].get<std::vector<int64_t>>(), g);
  models::warp_logits(scores, g, 1);
  double m = -std::numeric_limits<double>::infinity(), total = 0;
  for (float x : scores) m = std::max(m, static_cast<double>(x));
  std::vector<double> p;
  for (float x : scores) total += p.emplace_back(std::exp(x - m));
  for (double& x : p) x /= total;
  return p;
}

// The same ids survive as in transformers (a zero stays exactly zero), with transformers' probabilities.
TEST(PlainSampling, WarpersAsTransformersAtTheirBoundaries) {
  const auto& rows = goldens()["rows"];
  ASSERT_GE(rows.size(), 9u);
  for (const auto& row : rows) {
    SCOPED_TRACE(row["generate"].dump() + " logits " + row["logits"].dump());
    const auto hf = row["probs"].get<std::vector<double>>();
    const auto ours = warped(row);
    ASSERT_EQ(ours.size(), hf.size());
    for (size_t i = 0; i < hf.size(); ++i) {
      EXPECT_EQ(ours[i] == 0, hf[i] == 0) << "id " << i << ": kiln " << ours[i] << ", transformers " << hf[i];
      EXPECT_NEAR(ours[i], hf[i], 2e-6) << "id " << i;
    }
  }
}

// next_token's draws over many seeds follow those probabilities (chi-square over the kept ids, and never an id
// transformers removes).
TEST(PlainSampling, DrawsFollowTransformersProbabilities) {
  constexpr int64_t kDraws = 20000;
  for (const auto& row : goldens()["rows"]) {
    SCOPED_TRACE(row["generate"].dump() + " logits " + row["logits"].dump());
    const GenerationConfig g = sampling(row["generate"]);
    const auto hf = row["probs"].get<std::vector<double>>();
    const auto logits = row["logits"].get<std::vector<float>>();
    const auto ids = row["ids"].get<std::vector<int64_t>>();
    std::vector<int64_t> count(hf.size(), 0);
    std::mt19937_64 rng(5);
    for (int64_t n = 0; n < kDraws; ++n) {
      const int64_t id = models::next_token(logits, g, rng, ids);
      ASSERT_TRUE(id >= 0 && id < static_cast<int64_t>(hf.size()));
      ++count[static_cast<size_t>(id)];
    }
    double chi2 = 0;
    int64_t kept = 0;
    for (size_t i = 0; i < hf.size(); ++i) {
      if (hf[i] == 0) {
        EXPECT_EQ(count[i], 0) << "id " << i << " is removed by transformers' warpers";
        continue;
      }
      ++kept;
      const double expected = hf[i] * kDraws;
      chi2 += (count[i] - expected) * (count[i] - expected) / expected;
    }
    // Far beyond the 0.999 quantile of chi-square with kept - 1 <= 9 degrees of freedom (27.9).
    EXPECT_LT(chi2, 30.0) << kept << " ids kept";
  }
}

// Greedy (do_sample false) takes the first of equal maxima after the processors, as torch.argmax does.
TEST(PlainSampling, GreedyTakesTheFirstMaximum) {
  GenerationConfig g;
  std::mt19937_64 rng(0);
  EXPECT_EQ(models::next_token({0.5f, 2.0f, 2.0f, 1.0f}, g, rng, {0}), 1);
  g.repetition_penalty = 2.0;  // id 1 seen: 2.0 / 2 = 1.0, so id 2 wins
  EXPECT_EQ(models::next_token({0.5f, 2.0f, 2.0f, 1.0f}, g, rng, {1}), 2);
}

// top_p 0, which transformers' TopPLogitsWarper accepts, keeps only the most likely id: sampling is greedy.
TEST(PlainSampling, TopPZeroKeepsTheMostLikely) {
  GenerationConfig g;
  g.do_sample = true;
  g.top_p = 0;
  std::mt19937_64 rng(3);
  for (int n = 0; n < 50; ++n) EXPECT_EQ(models::next_token({0.1f, 0.3f, 0.2f, 0.25f}, g, rng, {0}), 1);
  g.top_p = 1.5;
  g.max_new_tokens = 1;
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/gpt2/gpt2_lm");
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(*model, {{1, 2}}, g); }), "top_p must be in [0, 1], got 1.5");
  g.top_p = 0;
  g.seed = 9;
  models::GenerationConfig greedy;
  greedy.max_new_tokens = 4;
  g.max_new_tokens = 4;
  EXPECT_EQ(models::generate(*model, {{1, 2}}, g), models::generate(*model, {{1, 2}}, greedy));
}

// Nothing left to draw from (every id banned) is a clear error, not an arbitrary id.
TEST(PlainSampling, NoTokenLeftIsAnError) {
  GenerationConfig g;
  g.do_sample = true;
  g.no_repeat_ngram_size = 1;  // every id already in the sequence is banned
  std::mt19937_64 rng(0);
  EXPECT_CONTAINS(testing::error_of([&] { models::next_token({0.5f, 2.0f, 1.0f}, g, rng, {0, 1, 2}); }),
                  "no token can be sampled");
  g.no_repeat_ngram_size = 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_CONTAINS(testing::error_of([&] { models::next_token({0.5f, nan, 1.0f}, g, rng, {0}); }), "NaN");
}

// num_return_sequences without beams: R draws per prompt, prompt-major, as
// transformers expands the inputs (the same as the prompts given R times);
// greedy decoding returns one sequence, as transformers' validate demands.
TEST(PlainSampling, NumReturnSequencesDrawsEachPromptThatManyTimes) {
  auto model = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/gpt2/gpt2_lm");
  GenerationConfig g;
  g.do_sample = true;
  g.max_new_tokens = 6;
  g.seed = 4;
  g.num_return_sequences = 3;
  const auto out = models::generate(*model, {{1, 2}, {3}}, g);
  ASSERT_EQ(out.size(), 6u);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i][0], i < 3 ? 1 : 3) << "row " << i;
  EXPECT_TRUE(out[0] != out[1] || out[1] != out[2]) << "three identical draws";
  g.num_return_sequences = 1;
  EXPECT_EQ(out, models::generate(*model, {{1, 2}, {1, 2}, {1, 2}, {3}, {3}, {3}}, g));
  g.do_sample = false;
  g.num_return_sequences = 2;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(*model, {{1, 2}}, g); }),
                  "greedy decoding without beam search returns one sequence per prompt, got num_return_sequences 2");
}

models::PreTrainedModel& golden(const std::string& name) {
  static std::map<std::string, std::unique_ptr<models::PreTrainedModel>> models;
  auto& m = models[name];
  if (!m) m = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/" + name);
  return *m;
}

// generate()'s two-token continuations over kDraws seeds land within three times the distance chance alone puts
// between such a sample and transformers' (a warper left out or in the wrong order lands far beyond it).
TEST(PlainSampling, DistributionAsTransformers) {
  constexpr int64_t kDraws = 500;
  const auto& cases = goldens()["cases"];
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["generate"].dump());
    GenerationConfig g = sampling(c["generate"]);
    g.max_new_tokens = c["generate"]["max_new_tokens"];
    g.eos_token_ids = {c["eos_token_id"].get<int64_t>()};
    const auto prompt = c["prompt"].get<std::vector<int64_t>>();
    std::map<std::string, int64_t> ours;
    std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(kDraws), prompt);
    g.seed = 1;  // one call: each prompt draws on from the same generator, a fresh sample per row
    for (const auto& seq : models::generate(golden(c["model"]), prompts, g))
      ++ours[testing::continuation_key(seq, prompt.size())];
    testing::expect_like_transformers(c, ours, kDraws, "plain sampling");
  }
}

}  // namespace
}  // namespace kiln
