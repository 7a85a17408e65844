// The CPU backend's products: oneDNN's sgemm, and its matmul primitive for
// the shapes prefers_matmul_primitive names, against a reference in double;
// products paired to run side by side.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/jit.h"
#include "kiln/compiler/compile.h"
#include "kiln/runtime/ops.h"
#include "support/program_util.h"
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

// One-row products (a decode step's projections and head) run on the
// backend's own loops: eight outputs or eight rows of B a pass, then the
// rest; short rows summed in eight parts of B's rows, long ones in each
// thread's column range; B's rows padded; into c from scratch (c holding
// NaN must not leak in) or onto the bias rows already in c.
TEST(CpuGemm, MatrixVectorLoopsMatchTheReference) {
  struct Case {
    int64_t N, K, pad;
  };
  for (bool tb : {true, false})
    for (const Case& t : {Case{1, 1, 0}, Case{13, 7, 0}, Case{8, 77, 3}, Case{1003, 300, 0}, Case{517, 203, 5},
                          Case{3000, 40, 1}, Case{5000, 20, 2}}) {
      SCOPED_TRACE(std::string(tb ? "NT" : "NN") + " N=" + std::to_string(t.N) + " K=" + std::to_string(t.K));
      const int64_t brows = tb ? t.N : t.K, bcols = tb ? t.K : t.N, ldb = bcols + t.pad;
      std::vector<float> a = testing::uniform_values(t.K, 11), b = testing::uniform_values(brows * ldb, 12);
      std::vector<float> c0 = testing::uniform_values(t.N, 13);
      for (bool accumulate : {false, true}) {
        std::vector<float> c = accumulate ? c0 : std::vector<float>(t.N, std::nanf(""));
        ASSERT_TRUE(backend::cpu::sgemm(false, tb, 1, t.N, t.K, a.data(), t.K, b.data(), ldb, c.data(), t.N,
                                        accumulate));
        const auto want = reference(false, tb, 1, t.N, t.K, a, t.K, b, ldb, nullptr, accumulate ? &c0 : nullptr, t.N);
        expect_close(c, want, 1, t.N, t.N, accumulate ? "accumulate" : "plain");
      }
    }
}

// x·Wᵀ at one row sums each output row's products in one order, whether the
// row is summed alone or among 16 rows folded together (gemv's dot16): every
// output has the bits of the same row's product alone.
TEST(CpuGemm, MatrixVectorRowsHaveTheBitsOfTheirProductAlone) {
  for (int64_t K : {16, 64, 77, 768}) {
    SCOPED_TRACE("K=" + std::to_string(K));
    const int64_t N = 37, ldb = K + 3;
    const std::vector<float> a = testing::uniform_values(K, 21), b = testing::uniform_values(N * ldb, 22);
    std::vector<float> c(N);
    ASSERT_TRUE(backend::cpu::sgemm(false, true, 1, N, K, a.data(), K, b.data(), ldb, c.data(), N, false));
    for (int64_t n = 0; n < N; ++n) {
      float alone = 0;
      ASSERT_TRUE(backend::cpu::sgemm(false, true, 1, 1, K, a.data(), K, b.data() + n * ldb, ldb, &alone, 1, false));
      ASSERT_EQ(std::memcmp(&alone, &c[n], sizeof alone), 0) << "row " << n << ": " << c[n] << " vs " << alone;
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

// Paired products (compiler::Instr::with_next) run side by side on two
// threads, one each: the executor gives the values of the same program
// without pairs, within a product's rounding (one thread's sgemm may split
// its work differently from two threads').
TEST(CpuGemm, PairedProductsGiveTheUnpairedValues) {
  Generator gen(8);
  Tensor x = randn({384, 512}, gen), w = randn({512, 512}, gen), y = randn({384, 512}, gen), v = randn({256, 512}, gen);
  mark_step();
  Tensor t = exp(x * 0.1);
  const std::vector<Tensor> results = {matmul(t, w) + 1.0, matmul(y, v, false, true), matmul(x, y, true, false)};
  std::vector<ir::NodePtr> params, nodes;
  for (const auto& r : results) nodes.push_back(r.node());
  const ir::Graph graph = ir::flatten(nodes, &params);
  std::vector<void*> param_ptrs;
  for (const auto& n : params) {
    n->data->wait();
    param_ptrs.push_back(n->data->storage->data());
  }
  auto run = [&](bool pairs, int* paired) {
    const compiler::Program p = compiler::compile(graph, {.concurrent_products = pairs});
    *paired = static_cast<int>(std::count_if(p.instrs.begin(), p.instrs.end(), [](const auto& i) { return i.with_next; }));
    testing::HostMemory mem;
    std::vector<void*> outs;
    for (size_t n : p.output_nbytes) outs.push_back(mem.get(n));
    const int threads = omp_get_max_threads();
    omp_set_num_threads(2);  // pairs run side by side on exactly two threads
    auto plan = backend::cpu::prepare(p);
    backend::cpu::execute(p, plan.get(), param_ptrs, outs, mem.get(p.arena_bytes));
    omp_set_num_threads(threads);
    std::vector<std::vector<float>> got;
    for (size_t o = 0; o < outs.size(); ++o) {
      const float* f = static_cast<const float*>(outs[o]);
      got.emplace_back(f, f + p.output_nbytes[o] / sizeof(float));
    }
    return got;
  };
  int with = 0, without = 0;
  const auto a = run(true, &with), b = run(false, &without);
  EXPECT_GE(with, 1);
  EXPECT_EQ(without, 0);
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o) {
    ASSERT_EQ(a[o].size(), b[o].size());
    for (size_t i = 0; i < a[o].size(); ++i)
      ASSERT_NEAR(a[o][i], b[o][i], 1e-4 * (1.0 + std::abs(b[o][i]))) << "output " << o << " at " << i;
  }
}

}  // namespace
}  // namespace kiln
