// Generation with rotary scaling that depends on the sequence's length
// (dynamic NTK, Phi-3's longrope): the token ids transformers 5.25's
// generate() returns (tests/goldens/rope_generation.json,
// gen_rope_generation_goldens.py), with and without the cache, greedy and
// with beams, for prompts shorter than, as long as and longer than the
// length where the frequencies change. With the cache a prompt's tokens are
// rotated as one sequence and Phi-3 computes its cache again where longrope
// switches to its long factors.

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "models/golden_model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::golden_model;

TEST(RopeGeneration, TokenIdsAsTransformersAcrossTheLengthWhereFrequenciesChange) {
  const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/rope_generation.json");
  ASSERT_GE(j["cases"].size(), 24u);
  for (const auto& c : j["cases"]) {
    models::GenerationConfig g;
    g.num_beams = c["num_beams"];
    g.use_cache = c["use_cache"];
    g.max_new_tokens = c["max_new_tokens"];
    g.eos_token_ids = {-1};  // (transformers' eos_token_id=None: every sequence runs its full length)
    const std::vector<int64_t> prompt = c["prompt"].get<std::vector<int64_t>>();
    const auto out = models::generate(golden_model(c["model"]), {prompt}, g);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], c["sequence"].get<std::vector<int64_t>>())
        << c["model"] << ", prompt of " << prompt.size() << ", num_beams " << g.num_beams << ", use_cache "
        << g.use_cache;
  }
}

}  // namespace
}  // namespace kiln
