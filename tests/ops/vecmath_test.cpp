// The CPU backend's vector exp: masked scores (-FLT_MAX) and other inputs
// below libmvec's fast range give the same values as before, lane by lane,
// whatever else shares their vector.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/vecmath.h"

namespace kiln::backend::cpu {
namespace {

TEST(VecMath, ExpOfVeryNegativeInputsIsExactlyTheScalarValue) {
  const std::vector<float> low = {-FLT_MAX, -1e30f, -200.0f, -104.5f, -104.0f, -103.5f, -100.0f, -95.0f,
                                  -90.0f, -87.5f, -87.34f, -INFINITY, -1000.0f, -88.0f, -103.0f, -103.9f};
  std::vector<float> r(low.size());
  vec::exp(low.data(), r.data(), static_cast<int64_t>(low.size()));
  for (size_t j = 0; j < low.size(); ++j) {
    SCOPED_TRACE(low[j]);
    const float want = std::exp(low[j]);
    EXPECT_EQ(std::memcmp(&r[j], &want, sizeof(float)), 0) << r[j] << " vs " << want;
  }
  EXPECT_EQ(r[0], 0.0f);
  EXPECT_GT(r[6], 0.0f);  // exp(-100) is a subnormal, not 0
}

TEST(VecMath, ExpLanesDoNotDependOnTheirNeighbours) {
  // The same ordinary inputs alone and mixed with masked ones.
  std::vector<float> plain, mixed;
  for (int j = 0; j < 64; ++j) {
    const float x = -20.0f + 0.37f * static_cast<float>(j);
    plain.push_back(x);
    mixed.push_back(j % 3 == 0 ? -FLT_MAX : x);
  }
  plain[4] = mixed[4] = NAN;  // in a vector with a masked lane (3)
  std::vector<float> a(plain.size()), b(mixed.size());
  vec::exp(plain.data(), a.data(), static_cast<int64_t>(plain.size()));
  vec::exp(mixed.data(), b.data(), static_cast<int64_t>(mixed.size()));
  for (size_t j = 0; j < plain.size(); ++j) {
    if (j == 4) {
      EXPECT_TRUE(std::isnan(a[j]));
      EXPECT_TRUE(std::isnan(b[j]));
    } else if (j % 3 == 0) {
      EXPECT_EQ(b[j], 0.0f);
    } else {
      EXPECT_EQ(a[j], b[j]) << "lane " << j;
      EXPECT_NEAR(a[j], std::exp(static_cast<double>(plain[j])), 4e-7 * a[j]);
    }
  }
}

}  // namespace
}  // namespace kiln::backend::cpu
