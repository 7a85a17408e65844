// The CPU backend's products: oneDNN's sgemm, and its matmul primitive for
// the shapes prefers_matmul_primitive names, against a reference in double.
#include <cmath>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/runtime/ops.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using backend::cpu::matmul_primitive;
using backend::cpu::prefers_matmul_primitive;

// c[i][j] = Σ_k A(i, k)·B(k, j) (+ bias[j]) (+ c[i][j]) in double; row-major
// storage, a transposed operand read at j·ld + i.
std::vector<double> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<float>& a,
                              int64_t lda, const std::vector<float>& b, int64_t ldb, const float* bias,
                              const std::vector<float>* c0, int64_t ldc) {
  std::vector<double> c(static_cast<size_t>(M * ldc), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = bias ? bias[j] : 0.0;
      if (c0) acc += (*c0)[i * ldc + j];
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
      c[i * ldc + j] = acc;
    }
  return c;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, int64_t M, int64_t N, int64_t ldc,
                  const char* what) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const double w = want[i * ldc + j], g = got[i * ldc + j];
      ASSERT_NEAR(g, w, 1e-4 * (1.0 + std::abs(w))) << what << " at (" << i << ", " << j << ")";
    }
}

// The primitive's layouts: plain and padded leading dimensions, every
// transpose, a bias row, and accumulation into c.
TEST(CpuGemm, MatmulPrimitiveMatchesTheReference) {
  struct Case {
    bool ta, tb;
    int64_t M, N, K, pad;
  };
  for (const Case& t : {Case{false, true, 37, 24, 200, 0}, Case{false, true, 64, 16, 96, 3},
                        Case{true, false, 29, 31, 45, 0}, Case{false, false, 8, 50, 70, 5},
                        Case{true, true, 17, 9, 33, 2}}) {
    const int64_t arows = t.ta ? t.K : t.M, acols = t.ta ? t.M : t.K;
    const int64_t brows = t.tb ? t.N : t.K, bcols = t.tb ? t.K : t.N;
    const int64_t lda = acols + t.pad, ldb = bcols + t.pad, ldc = t.N + t.pad;
    std::vector<float> a = testing::uniform_values(arows * lda, 1), b = testing::uniform_values(brows * ldb, 2);
    std::vector<float> bias = testing::uniform_values(t.N, 3), c0 = testing::uniform_values(t.M * ldc, 4);
    for (int mode = 0; mode < 3; ++mode) {  // plain, bias, accumulate
      std::vector<float> c = c0;
      const float* bp = mode == 1 ? bias.data() : nullptr;
      ASSERT_TRUE(matmul_primitive(t.ta, t.tb, t.M, t.N, t.K, a.data(), lda, b.data(), ldb, c.data(), ldc, bp,
                                   mode == 2))
          << "oneDNN declined the layout";
      const auto want = reference(t.ta, t.tb, t.M, t.N, t.K, a, lda, b, ldb, bp, mode == 2 ? &c0 : nullptr, ldc);
      expect_close(c, want, t.M, t.N, ldc, mode == 0 ? "plain" : mode == 1 ? "bias" : "accumulate");
      for (int64_t i = 0; i < t.M; ++i)  // the padding between rows is not written
        for (int64_t j = t.N; j < ldc; ++j) ASSERT_EQ(c[i * ldc + j], c0[i * ldc + j]);
    }
  }
}

TEST(CpuGemm, PrimitiveTakesLongReductionsIntoSmallOutputs) {
  EXPECT_TRUE(prefers_matmul_primitive(false, true, 1024, 768, 3072));   // BERT's FFN down-projection
  EXPECT_TRUE(prefers_matmul_primitive(false, true, 1024, 768, 2304));   // GPT-2's c_attn input gradient
  EXPECT_FALSE(prefers_matmul_primitive(false, true, 1024, 3072, 768));  // K ≤ N
  EXPECT_FALSE(prefers_matmul_primitive(false, true, 2048, 768, 3072));  // 2²⁰ outputs or more
  EXPECT_FALSE(prefers_matmul_primitive(false, false, 1024, 768, 3072));
  EXPECT_FALSE(prefers_matmul_primitive(true, false, 768, 768, 1024));
  EXPECT_FALSE(prefers_matmul_primitive(false, true, 1, 768, 3072));  // matrix-vector: our own loop
}

// Through the compiler: x·wᵀ + b with a long reduction (the primitive, the
// bias its own argument), the same with a strided bias (the rows start as
// the bias and the primitive adds to them), and stacked batches.
TEST(CpuGemm, ProductsThePrimitiveRunsMatchTheReference) {
  const int64_t M = 24, N = 10, K = 130;
  ASSERT_TRUE(prefers_matmul_primitive(false, true, M, N, K));
  std::vector<float> xv = testing::uniform_values(M * K, 5), wv = testing::uniform_values(N * K, 6);
  std::vector<float> bv = testing::uniform_values(2 * N, 7);
  Tensor x = Tensor::from_vector(xv, {2, M / 2, K}), w = Tensor::from_vector(wv, {N, K});
  Tensor b2 = Tensor::from_vector(bv, {2 * N});
  Tensor contiguous_bias = slice(b2, 0, 0, N), strided_bias = slice(b2, 0, 0, 2 * N, 2);
  std::vector<float> bias_c(bv.begin(), bv.begin() + N), bias_s;
  for (int64_t j = 0; j < N; ++j) bias_s.push_back(bv[2 * j]);
  const auto want_c = reference(false, true, M, N, K, xv, K, wv, K, bias_c.data(), nullptr, N);
  const auto want_s = reference(false, true, M, N, K, xv, K, wv, K, bias_s.data(), nullptr, N);
  expect_close((matmul(x, w, false, true) + contiguous_bias).to_vector<float>(), want_c, M, N, N, "contiguous bias");
  expect_close((matmul(x, w, false, true) + strided_bias).to_vector<float>(), want_s, M, N, N, "strided bias");
}

}  // namespace
}  // namespace kiln
