// Rotary scaling configs beyond the goldens (model_goldens_test.cpp runs
// each rope_type through transformers' own models): YaRN's defaults and
// the frequencies at both ends of its ramp, and the errors a bad
// rope_scaling object gets.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/models/rope.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using nlohmann::json;
using models::RopeScaling;

RopeScaling yarn(json params) {
  params["rope_type"] = "yarn";
  return RopeScaling::from_json(json{{"rope_scaling", params}}, 10000.0, "config.json");
}

TEST(Rope, YarnKeepsHighFrequenciesAndDividesLowOnes) {
  const RopeScaling r = yarn({{"factor", 4.0}, {"original_max_position_embeddings", 2048}});
  const int64_t D = 64;
  const std::vector<float> inv = r.inv_freq(D, 8192, 1);
  const std::vector<float> plain = RopeScaling{}.inv_freq(D, 8192, 1);
  ASSERT_EQ(inv.size(), plain.size());
  // Dimensions rotating more than beta_fast (32) times over the original
  // context keep their frequency; those rotating less than beta_slow (1)
  // time are interpolated: divided by the factor.
  EXPECT_EQ(inv.front(), plain.front());
  EXPECT_FLOAT_EQ(inv.back(), plain.back() / 4.0f);
  EXPECT_FLOAT_EQ(r.attention_scaling(8192), static_cast<float>(0.1 * std::log(4.0) + 1.0));
}

TEST(Rope, YarnOriginalContextDefaultsToMaxPositions) {
  // transformers 5 fills original_max_position_embeddings from the config's
  // max_position_embeddings when the rope parameters do not give it.
  const RopeScaling given = yarn({{"factor", 4.0}, {"original_max_position_embeddings", 512}});
  const RopeScaling absent = yarn({{"factor", 4.0}});
  EXPECT_EQ(absent.inv_freq(32, 512, 1), given.inv_freq(32, 512, 1));
  json written;
  absent.write(written);
  EXPECT_FALSE(written["rope_scaling"].contains("original_max_position_embeddings")) << written.dump();
}

TEST(Rope, YarnAttentionFactorFromMscales) {
  const RopeScaling r = yarn({{"factor", 8.0}, {"mscale", 1.2}, {"mscale_all_dim", 0.8}});
  const double expected = (0.1 * 1.2 * std::log(8.0) + 1) / (0.1 * 0.8 * std::log(8.0) + 1);
  EXPECT_FLOAT_EQ(r.attention_scaling(4096), static_cast<float>(expected));
  const RopeScaling given = yarn({{"factor", 8.0}, {"attention_factor", 0.5}, {"mscale", 1.2}, {"mscale_all_dim", 0.8}});
  EXPECT_FLOAT_EQ(given.attention_scaling(4096), 0.5f);
}

TEST(Rope, BadYarnParametersAreNamed) {
  using testing::error_of;
  EXPECT_CONTAINS(error_of([] { yarn({{"original_max_position_embeddings", 64}}); }), "rope_type 'yarn' needs 'factor'");
  EXPECT_CONTAINS(error_of([] { yarn({{"factor", 2.0}, {"low_freq_factor", 1.0}}); }),
                  "'low_freq_factor' is not a parameter of rope_type 'yarn'");
  EXPECT_CONTAINS(error_of([] { yarn({{"factor", 2.0}, {"beta_fast", "fast"}}); }), "beta_fast");
  EXPECT_CONTAINS(error_of([] { yarn({{"factor", 2.0}, {"beta_fast", 1.0}, {"beta_slow", 2.0}}).validate(16, "c.json"); }),
                  "yarn needs beta_fast > beta_slow, got 1 and 2");
  EXPECT_CONTAINS(error_of([] { yarn({{"factor", 2.0}, {"truncate", "yes"}}); }), "truncate");
  EXPECT_CONTAINS(error_of([] {
                    RopeScaling::from_json(json{{"rope_scaling", {{"rope_type", "ntk"}, {"factor", 2.0}}}}, 1e4, "c.json");
                  }),
                  "rope_type 'ntk' is not supported (kiln builds default, linear, dynamic, llama3, longrope, yarn)");
}

}  // namespace
}  // namespace kiln
