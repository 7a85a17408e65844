// Generation: the key/value cache gives exactly the tokens of recomputing the
// whole sequence each step, and decoding compiles once per cache bucket.
#include "kiln/models/generation.h"
#include "support/test_util.h"

namespace kiln {
namespace {

std::unique_ptr<models::PreTrainedModel> tiny_gpt2() {
  return models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/gpt2/gpt2_lm");
}

TEST(Generation, CachedGreedyEqualsStepByStepArgmax) {
  auto model = tiny_gpt2();
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  std::vector<std::vector<int64_t>> prompts{{5, 17, 42, 8, 61}, {3}};
  models::GenerationConfig g;
  g.max_new_tokens = 10;
  g.eos_token_id = -1;  // never stop early
  g.use_cache = false;
  auto reference = models::generate(gpt2, prompts, g);
  g.use_cache = true;
  metrics::reset();
  auto cached = models::generate(gpt2, prompts, g);
  EXPECT_EQ(cached, reference);
  ASSERT_EQ(cached[0].size(), 15u);
  EXPECT_EQ(std::vector<int64_t>(cached[0].begin(), cached[0].begin() + 5), prompts[0]);
  // 15 + 10 decode steps, one graph: the position and the cache are inputs.
  EXPECT_EQ(metrics::snapshot().compiles, 1) << metrics::report();
}

TEST(Generation, SamplingIsSeededAndStopsAtEos) {
  auto model = tiny_gpt2();
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  models::GenerationConfig g;
  g.max_new_tokens = 12;
  g.do_sample = true;
  g.temperature = 0.8;
  g.top_k = 20;
  g.top_p = 0.9;
  g.seed = 5;
  g.eos_token_id = -1;
  auto a = models::generate(gpt2, {{1, 2, 3}}, g);
  auto b = models::generate(gpt2, {{1, 2, 3}}, g);
  EXPECT_EQ(a, b);
  g.seed = 6;
  auto c = models::generate(gpt2, {{1, 2, 3}}, g);
  EXPECT_NE(a, c);
  // Stop at the first EOS.
  g.do_sample = false;
  models::GenerationConfig plain;
  plain.max_new_tokens = 12;
  plain.eos_token_id = -1;
  auto greedy = models::generate(gpt2, {{1, 2, 3}}, plain);
  g.eos_token_id = greedy[0][5];
  auto stopped = models::generate(gpt2, {{1, 2, 3}}, g);
  EXPECT_EQ(stopped[0].back(), greedy[0][5]);
  EXPECT_LE(stopped[0].size(), 6u);
}

TEST(Generation, TooLongIsAClearError) {
  auto model = tiny_gpt2();
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  models::GenerationConfig g;
  g.max_new_tokens = 40;  // 3 + 40 > n_positions 32
  EXPECT_THROW(models::generate(gpt2, {{1, 2, 3}}, g), Error);
}

}  // namespace
}  // namespace kiln
