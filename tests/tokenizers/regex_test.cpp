// Regex's anchored matches (Python's re.fullmatch and re.match, which PEFT's
// module patterns use) and its bound on backtracking.
#include <gtest/gtest.h>

#include <string>

#include "kiln/core/error.h"
#include "kiln/tokenizers/regex.h"
#include "support/test_util.h"

namespace kiln::tokenizers {
namespace {

TEST(Regex, FullMatchIsAnchoredAtBothEnds) {
  const Regex r(R"(.*\.(q_proj|v_proj))", "test");
  EXPECT_TRUE(r.full_match("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(r.full_match("model.layers.0.self_attn.q_proj.lora_A"));
  EXPECT_FALSE(r.full_match("q_proj"));
  // Python's syntax: lookarounds and named groups.
  const Regex named(R"((?!.*vision)(?P<path>.*)\.q_proj)", "test");
  EXPECT_TRUE(named.full_match("model.layers.0.q_proj"));
  EXPECT_FALSE(named.full_match("vision.layers.0.q_proj"));
}

TEST(Regex, MatchStartGivesTheGroupsOfAMatchAtTheStart) {
  const Regex r(R"(.*?\.[^.]*\.(\d+)\.)", "test");
  auto m = r.match_start("bert.encoder.layer.3.attention.self.query");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->front(), "bert.encoder.layer.3.");
  EXPECT_EQ(m->back(), "3");
  EXPECT_FALSE(r.match_start("layers.3.q"));  // a dot is needed before the name
  const Regex optional_group(R"((x)?(\d+))", "test");
  m = optional_group.match_start("12abc");
  ASSERT_TRUE(m);
  EXPECT_EQ(*m, (std::vector<std::string>{"12", "", "12"}));  // group 1 took no part
}

TEST(Regex, PatternsThatBacktrackWithoutEndAreErrorsNotHangs) {
  const Regex r("(a|aa)+$", "test");
  const std::string subject = std::string(40, 'a') + "!";
  EXPECT_CONTAINS(testing::error_of([&] { r.full_match(subject); }), "regex '(a|aa)+$': matching");
  EXPECT_CONTAINS(testing::error_of([&] { r.match_start(subject); }), "failed");
}

}  // namespace
}  // namespace kiln::tokenizers
