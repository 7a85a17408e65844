// The CPU backend's vector exp: masked scores (-FLT_MAX) and other inputs
// below libmvec's fast range give the same values as before, lane by lane,
// whatever else shares their vector. The 16-lane exp of the softmax rows
// (AVX-512) stays within its stated error, and the rows' exp-and-sum step
// gives each exponential and their sum at every row length. The tanh-form
// GELU keeps its relative accuracy where 1 + tanh u cancels.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "kiln/backend/cpu/executor.h"
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

#ifdef __AVX512F__
// x's error in units in the last place of the float nearest `want`.
double ulps(float x, double want) {
  const float w = static_cast<float>(want);
  const double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
  return std::fabs(x - want) / ulp;
}

TEST(VecMath, SixteenLaneExpIsWithinOneUlpAndKeepsTheSpecialValues) {
  double worst = 0;
  for (float x0 = -103.0f; x0 < 88.5f; x0 += 0.0173f) {
    alignas(64) float xs[16], ys[16];
    for (int l = 0; l < 16; ++l) xs[l] = x0 + 0.001f * static_cast<float>(l);
    _mm512_store_ps(ys, vec::exp16(_mm512_load_ps(xs)));
    for (int l = 0; l < 16; ++l) worst = std::max(worst, ulps(ys[l], std::exp(static_cast<double>(xs[l]))));
  }
  EXPECT_LE(worst, 1.05);
  const float special[16] = {NAN, -INFINITY, INFINITY, -FLT_MAX, 0.0f, -0.0f, 88.72f, 88.73f,
                             -87.4f, -103.9f, -104.5f, -1e30f, 1e30f, FLT_MAX, 1.0f, -1.0f};
  alignas(64) float xs[16], ys[16];
  std::copy(special, special + 16, xs);
  _mm512_store_ps(ys, vec::exp16(_mm512_load_ps(xs)));
  EXPECT_TRUE(std::isnan(ys[0]));
  EXPECT_EQ(ys[1], 0.0f);
  EXPECT_EQ(ys[2], INFINITY);
  EXPECT_EQ(ys[3], 0.0f);
  EXPECT_EQ(ys[4], 1.0f);
  EXPECT_EQ(ys[5], 1.0f);
  EXPECT_LE(ulps(ys[6], std::exp(static_cast<double>(xs[6]))), 1.05);
  EXPECT_EQ(ys[7], INFINITY);
  EXPECT_LE(ulps(ys[8], std::exp(static_cast<double>(xs[8]))), 1.05);  // a normal float just above the subnormals
  EXPECT_EQ(ys[9], std::exp(-103.9f));            // the least subnormal
  EXPECT_EQ(ys[10], 0.0f);
  EXPECT_EQ(ys[11], 0.0f);
  EXPECT_EQ(ys[12], INFINITY);
  EXPECT_EQ(ys[13], INFINITY);
  EXPECT_EQ(ys[14], std::exp(1.0f));
  EXPECT_EQ(ys[15], std::exp(-1.0f));
}
#endif

// The tanh-form GELU as x·σ(2u): accurate where ½x(1 + tanh u) cancels
// (x < -5.5, where the float 1 + tanh u is 0), and its gradient with it.
TEST(VecMath, TanhGeluKeepsItsRelativeAccuracyForNegativeInputs) {
  std::vector<float> x, dy;
  for (float v = -9.0f; v <= 3.0f; v += 0.25f) {
    x.push_back(v);
    dy.push_back(1.0f);
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> g(x.size()), dg(x.size());
  vec::VecForm<ir::Op::Gelu>::array(x.data(), nullptr, g.data(), n, true);
  vec::VecForm<ir::Op::GeluGrad>::array(x.data(), dy.data(), dg.data(), n, true);
  for (int64_t j = 0; j < n; ++j) {
    const double v = x[j], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    const double s = 1.0 / (1.0 + std::exp(-2.0 * u));  // ½(1 + tanh u)
    const double want = v * s;
    const double want_grad = s + 2.0 * v * s * (1.0 - s) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * v * v);
    EXPECT_NEAR(g[j], want, 1e-5 * std::fabs(want) + 1e-30) << "x " << v;
    EXPECT_NEAR(dg[j], want_grad, 2e-5 * std::fabs(want_grad) + 1e-7) << "x " << v;
  }
}

TEST(VecMath, ExpShiftedSumGivesEachValueAndTheSumAtEveryLength) {
  for (int64_t n : {1, 7, 15, 16, 17, 33, 511, 512, 513, 1100}) {
    std::vector<float> x(static_cast<size_t>(n)), e(x.size(), -1.0f);
    for (int64_t j = 0; j < n; ++j) x[j] = std::sin(0.7f * static_cast<float>(j)) * 6.0f;
    x[n / 2] = -FLT_MAX;  // a masked score
    const float m = 6.0f;
    const double sum = exp_shifted_sum(x.data(), m, e.data(), n);
    double want_sum = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double want = std::exp(static_cast<double>(x[j] - m));
      EXPECT_NEAR(e[j], want, 5e-7 * want) << "n " << n << " j " << j;
      want_sum += want;
    }
    EXPECT_EQ(e[n / 2], 0.0f);
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << "n " << n;
  }
}

}  // namespace
}  // namespace kiln::backend::cpu
