// Beam sampling (num_beams > 1 with do_sample), transformers' _beam_search
// under do_sample=True: the continuations are drawn from the warped scores
// (temperature, top_k, top_p) without replacement, then ranked. kiln's
// generator is not torch's, so the ids cannot equal transformers' seed for
// seed: the sampled tokens are checked against the warpers' sets on synthetic
// logits, the draws for reproducibility, and the distribution of outputs
// against transformers' over many seeds (tests/goldens/beam_sampling.json).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/beam_search.h"
#include "kiln/models/generation.h"
#include "models/sampling_distance.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using models::GenerationConfig;

models::PreTrainedModel& golden(const std::string& name) {
  static std::map<std::string, std::unique_ptr<models::PreTrainedModel>> models;
  auto& m = models[name];
  if (!m) m = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/" + name);
  return *m;
}

// Random logits for `rows` rows of `vocab` ids.
std::vector<float> random_logits(std::mt19937& rng, int64_t rows, int64_t vocab) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& x : logits) x = normal(rng);
  return logits;
}

// The ids transformers' warpers keep in one row of logits, computed as the definitions read: top_k the k largest
// (at least `min_keep`); top_p each id whose more likely ids (at temperature T) hold less than top_p of the mass,
// and the min_keep most likely.
std::set<int64_t> allowed(const float* logits, int64_t vocab, const GenerationConfig& g, int64_t min_keep) {
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) order[static_cast<size_t>(i)] = i;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  const int64_t k = g.top_k > 0 ? std::max(g.top_k, min_keep) : vocab;
  std::vector<double> p;
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += p.emplace_back(std::exp((logits[order[i]] - logits[order[0]]) / g.temperature));
  std::set<int64_t> keep;
  double above = 0;
  for (int64_t i = 0; i < k; ++i) {
    if (i < min_keep || above < g.top_p) keep.insert(order[i]);
    above += p[static_cast<size_t>(i)] / total;
  }
  return keep;
}

// Every running hypothesis after each step continues its parent row with a token the warpers keep for that row's
// logits; at the first step, only each input's first beam (the others start at -1e9) is continued.
void expect_tokens_within_warpers(const GenerationConfig& g) {
  const int64_t vocab = 40, batch = 2, eos = 39;
  std::mt19937 rng(11);
  models::BeamSearch search({{1, 2}, {3, 4}}, {eos}, g);
  for (int step = 0; !search.done(); ++step) {
    const std::vector<float> logits = random_logits(rng, search.rows(), vocab);
    const std::vector<int64_t> parents = search.step(logits, vocab);
    if (search.done()) break;
    for (int64_t r = 0; r < search.rows(); ++r) {
      const int64_t parent = parents[static_cast<size_t>(r)];
      if (step == 0) {
        EXPECT_EQ(parent % g.num_beams, 0) << "row " << r;
      }
      const int64_t token = search.running()[static_cast<size_t>(r)].back();
      EXPECT_TRUE(allowed(logits.data() + parent * vocab, vocab, g, 2).count(token))
          << "step " << step << " row " << r << " token " << token;
    }
  }
  EXPECT_EQ(search.results().size(), static_cast<size_t>(batch * g.num_return_sequences));
}

TEST(BeamSampling, SampledTokensWithinTopK) {
  GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 3;
  g.top_k = 5;
  g.temperature = 1.3;
  g.max_new_tokens = 8;
  g.num_return_sequences = 2;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    g.seed = seed;
    expect_tokens_within_warpers(g);
  }
}

TEST(BeamSampling, SampledTokensWithinTopP) {
  GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 2;
  g.top_k = 0;
  g.top_p = 0.6;
  g.temperature = 0.7;
  g.max_new_tokens = 8;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    g.seed = seed;
    expect_tokens_within_warpers(g);
  }
}

// A top_k smaller than 2·num_beams: fewer candidates than the draw needs have a probability; those that do come
// first, and the search still ends with num_return_sequences sequences per input, as transformers' does.
TEST(BeamSampling, FewerCandidatesThanDrawsFillsWithTheRest) {
  GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 4;
  g.top_k = 2;
  g.max_new_tokens = 5;
  g.num_return_sequences = 4;
  g.seed = 3;
  const auto out = models::generate(golden("gpt2/gpt2_lm"), {{5, 17, 42, 8}}, g);
  ASSERT_EQ(out.size(), 4u);
  for (const auto& seq : out) EXPECT_GE(seq.size(), 5u);
}

TEST(BeamSampling, SeededAndReproducible) {
  auto& gpt2 = golden("gpt2/gpt2_lm");
  GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 3;
  g.num_return_sequences = 2;
  g.temperature = 1.5;
  g.top_k = 0;
  g.max_new_tokens = 6;
  g.seed = 7;
  const auto a = models::generate(gpt2, {{5, 17, 42, 8}, {3, 60, 11}}, g);
  EXPECT_EQ(models::generate(gpt2, {{5, 17, 42, 8}, {3, 60, 11}}, g), a);
  std::set<std::vector<std::vector<int64_t>>> seen;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    g.seed = seed;
    seen.insert(models::generate(gpt2, {{5, 17, 42, 8}, {3, 60, 11}}, g));
  }
  EXPECT_GT(seen.size(), 4u) << "the seed hardly changes the draws";
}

// T5 runs a batch's prompts in one search: each input draws from its own generator, so its beams are the ones it
// gets alone.
TEST(BeamSampling, T5InputsDrawAsAlone) {
  auto& t5 = golden("t5/t5_relu_tied");
  GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 2;
  g.temperature = 2.0;
  g.top_k = 0;
  g.max_new_tokens = 6;
  g.eos_token_ids = {-1};
  g.seed = 4;
  const std::vector<std::vector<int64_t>> prompts = {{4, 20, 31, 9, 1}, {7, 7, 50, 1}};
  const auto batched = models::generate(t5, prompts, g);
  ASSERT_EQ(batched.size(), 2u);
  EXPECT_EQ(models::generate(t5, {prompts[0]}, g)[0], batched[0]);
  EXPECT_EQ(models::generate(t5, {prompts[1]}, g)[0], batched[1]);
}

// kiln's draws per case: each is a generate() call of a few milliseconds' decoding.
constexpr int64_t kDraws = 600;

// kiln's outputs over kDraws seeds land within three times the distance chance alone puts between such a sample
// and the golden's of transformers' distribution (greedy beams, or a warper left out, land far beyond it).
TEST(BeamSampling, DistributionAsTransformers) {
  const auto cases = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/beam_sampling.json")["cases"];
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["generate"].dump());
    GenerationConfig g;
    g.do_sample = true;
    g.num_beams = c["generate"]["num_beams"];
    g.temperature = c["generate"]["temperature"];
    g.top_k = c["generate"]["top_k"];
    g.top_p = c["generate"]["top_p"];
    g.max_new_tokens = c["generate"]["max_new_tokens"];
    g.eos_token_ids = {c["eos_token_id"].get<int64_t>()};
    const auto prompt = c["prompt"].get<std::vector<int64_t>>();
    std::map<std::string, int64_t> ours;
    for (int64_t seed = 0; seed < kDraws; ++seed) {
      g.seed = static_cast<uint64_t>(seed);
      ++ours[testing::continuation_key(models::generate(golden(c["model"]), {prompt}, g)[0], prompt.size())];
    }
    testing::expect_like_transformers(c, ours, kDraws, "beam sampling");
  }
}

}  // namespace
}  // namespace kiln
