// top_h: the ids transformers 5.25's TopHLogitsWarper keeps of crafted rows
// (tests/goldens/top_h.json, gen_top_h_goldens.py), and its range.
#include <algorithm>
#include <iterator>
#include <limits>
#include <string>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "support/test_util.h"

namespace kiln {
namespace {

TEST(TopH, KeepsTheIdsTransformersKeeps) {
  const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/top_h.json");
  ASSERT_GE(j["rows"].size(), 90u);
  int top_h_one = 0;
  for (const auto& row : j["rows"]) {
    models::GenerationConfig g;
    g.do_sample = true;
    g.top_k = 0;
    g.top_h = row["top_h"].get<double>();
    std::vector<float> scores;
    for (const auto& x : row["scores"])
      scores.push_back(x.is_string() ? -std::numeric_limits<float>::infinity() : x.get<float>());
    models::warp_logits(scores, g, 1);
    std::vector<int64_t> kept;
    for (size_t i = 0; i < scores.size(); ++i)
      if (scores[i] != -std::numeric_limits<float>::infinity()) kept.push_back(static_cast<int64_t>(i));
    const auto want = row["kept"].get<std::vector<int64_t>>();
    if (*g.top_h < 1) {
      EXPECT_EQ(kept, want) << "top_h " << *g.top_h << ", " << row["scores"].size() << " scores";
      continue;
    }
    // top_h 1 compares the entropy with its own cumulative sum: whether the least likely ids stay is rounding
    // (torch's vectorized sums), so the sets may differ in an id or two at the tail.
    std::vector<int64_t> differ;
    std::set_symmetric_difference(kept.begin(), kept.end(), want.begin(), want.end(), std::back_inserter(differ));
    EXPECT_LE(differ.size(), 2u) << row["scores"].size() << " scores";
    ++top_h_one;
  }
  EXPECT_LT(top_h_one, 20);  // most rows are compared exactly
}

TEST(TopH, OutsideItsRangeIsAnError) {
  models::GenerationConfig g;
  g.do_sample = true;
  g.top_h = 1.5;
  EXPECT_CONTAINS(testing::error_of([&] { models::check_logits_processors(g, 10); }),
                  "top_h must be in (0, 1], got 1.5");
  g.top_h = 0;
  EXPECT_CONTAINS(testing::error_of([&] { models::check_logits_processors(g, 10); }), "top_h must be in (0, 1]");
}

}  // namespace
}  // namespace kiln
