// Rows longer than the kernels' blocks (512 for exponentials, 8192 for
// contiguous sums) take the vectorised paths: they must agree with a plain
// double-precision computation, tails and ignored rows included. The op
// goldens cover the short rows.
#include <cmath>
#include <vector>

#include "support/test_util.h"

namespace kiln {
namespace {

using kiln::testing::all_close;

std::vector<float> wavy(int64_t n, double scale) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(0.37 * i) + 0.01 * (i % 7));
  return v;
}

std::vector<double> as_double(const Tensor& t) { return t.to_vector<double>(); }

TEST(LongRows, SoftmaxWithMaskAndLogSoftmaxMatchDouble) {
  const int64_t R = 3, L = 1100;  // two full blocks of 512 and a tail
  std::vector<float> x = wavy(R * L, 6.0), mask(R * L, 0.0f);
  for (int64_t i = 0; i < R * L; i += 5) mask[i] = -1e4f;
  Tensor tx = Tensor::from_vector(x, {R, L}), tm = Tensor::from_vector(mask, {R, L});
  std::vector<double> want_p(R * L), want_lp(R * L);
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, s = 0, m0 = -INFINITY, s0 = 0;
    for (int64_t k = 0; k < L; ++k) {
      m = std::max(m, double(x[r * L + k]) + mask[r * L + k]);
      m0 = std::max(m0, double(x[r * L + k]));
    }
    for (int64_t k = 0; k < L; ++k) {
      s += std::exp(double(x[r * L + k]) + mask[r * L + k] - m);
      s0 += std::exp(double(x[r * L + k]) - m0);
    }
    for (int64_t k = 0; k < L; ++k) {
      want_p[r * L + k] = std::exp(double(x[r * L + k]) + mask[r * L + k] - m) / s;
      want_lp[r * L + k] = double(x[r * L + k]) - m0 - std::log(s0);
    }
  }
  EXPECT_TRUE(all_close(as_double(softmax(tx, -1, tm)), want_p, 1e-5, 1e-9));
  EXPECT_TRUE(all_close(as_double(log_softmax(tx, -1)), want_lp, 1e-6, 1e-5));
}

TEST(LongRows, CrossEntropyAndItsGradientMatchDouble) {
  const int64_t N = 4, C = 1300;
  const double eps = 0.1;
  std::vector<float> x = wavy(N * C, 4.0);
  std::vector<int64_t> labels{7, -100, 1299, 512};  // row 1 ignored
  Tensor logits = Tensor::from_vector(x, {N, C}).requires_grad_();
  Tensor loss = cross_entropy(logits, Tensor::from_vector(labels, {N}), -100, eps);
  loss.backward();
  double total = 0;
  std::vector<double> want_grad(N * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (labels[n] < 0) continue;
    const float* xr = x.data() + n * C;
    double m = -INFINITY, s = 0, mean = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, double(xr[c]));
    for (int64_t c = 0; c < C; ++c) {
      s += std::exp(xr[c] - m);
      mean += xr[c];
    }
    double lse = m + std::log(s);
    total += (1 - eps) * (lse - xr[labels[n]]) + eps * (lse - mean / C);
    for (int64_t c = 0; c < C; ++c)
      want_grad[n * C + c] = (std::exp(xr[c] - m) / s - (c == labels[n] ? 1 - eps : 0.0) - eps / C) / 3.0;
  }
  EXPECT_NEAR(loss.item(), total / 3.0, 1e-5 * std::abs(total / 3.0));
  EXPECT_TRUE(all_close(as_double(logits.grad()), want_grad, 1e-5, 1e-9));
}

TEST(LongRows, FullSumsOfLongVectorsMatchDouble) {
  const int64_t n = 3 * 8192 + 123;
  std::vector<float> x = wavy(n, 1.0);
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  Tensor t = Tensor::from_vector(x, {3, n / 3});
  Tensor s = sum(t * t);
  EXPECT_NEAR(s.item(), want, 1e-6 * want);
  // Rows of a matrix: one sum per row.
  Tensor rows = sum(Tensor::from_vector(x, {1, n}), {1});
  EXPECT_NEAR(rows.item(), [&] {
    double a = 0;
    for (float v : x) a += v;
    return a;
  }(), 1e-3);
  std::vector<int64_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  EXPECT_EQ(sum(Tensor::from_vector(ids, {n})).to_vector<int64_t>()[0], n * (n - 1) / 2);
}

// A copy of a view whose rows are contiguous (heads transposed, a slice, a
// broadcast) goes row by row with memcpy: every element lands where the
// view says, for each element size.
TEST(LongRows, CopiesOfViewsWithContiguousRows) {
  const int64_t B = 2, T = 3, H = 5, D = 20;
  std::vector<float> x(B * T * H * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  const Tensor tx = Tensor::from_vector(x, {B, T, H, D});
  const std::vector<float> heads = permute(tx, {0, 2, 1, 3}).to_vector<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(heads[((b * H + h) * T + t) * D + d], x[((b * T + t) * H + h) * D + d]) << b << h << t << d;

  std::vector<int64_t> ids(6 * 40);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i) * 1000003;
  const std::vector<int64_t> cut = slice(Tensor::from_vector(ids, {6, 40}), 0, 1, 6, 2).to_vector<int64_t>();
  ASSERT_EQ(cut.size(), 3u * 40);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t c = 0; c < 40; ++c) ASSERT_EQ(cut[r * 40 + c], ids[(1 + 2 * r) * 40 + c]);

  std::vector<float> row(24);
  for (size_t i = 0; i < row.size(); ++i) row[i] = 0.5f * static_cast<float>(i);
  const std::vector<float> wide = broadcast_to(Tensor::from_vector(row, {1, 24}), {7, 24}).to_vector<float>();
  for (int64_t r = 0; r < 7; ++r)
    for (int64_t c = 0; c < 24; ++c) ASSERT_EQ(wide[r * 24 + c], row[c]);

  // bool (one byte): a transposed mask
  Tensor mask = gt(Tensor::from_vector(x, {B * T, H * D}), full({}, 100.0, DType::f32));
  const std::vector<float> back = cast(permute(reshape(mask, {B, T, H, D}), {0, 2, 1, 3}), DType::f32).to_vector<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d)
          ASSERT_EQ(back[((b * H + h) * T + t) * D + d], x[((b * T + t) * H + h) * D + d] > 100.0f ? 1.0f : 0.0f);
}

}  // namespace
}  // namespace kiln
