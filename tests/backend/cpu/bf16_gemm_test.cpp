// Products of bf16 operands on the CPU (--bf16): oneDNN's bf16 matmul where
// the CPU has bf16 dot products (AVX512-BF16, AMX), the operands widened to
// f32 for sgemm elsewhere. Either way a product is the sum of the exact
// products of the bf16 values, summed in f32: both are checked against the
// rounded operands multiplied and summed in double, within f32 summation
// error, and against each other.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <string>
#include <cstdint>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/core/bf16.h"
#include "kiln/runtime/autocast.h"
#include "kiln/runtime/ops.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using backend::cpu::cpu_has_bf16_products;
using backend::cpu::native_bf16_products;
using backend::cpu::set_native_bf16_products;

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_from_float(v[i]);
  return h;
}

std::vector<float> rounded(std::vector<float> v) {
  for (auto& x : v) x = round_to_bf16(x);
  return v;
}

// Row-major c = op(a)·op(b) (+ bias) in double, and the bound on an f32
// sum's error: K·2⁻²⁴·Σ|products| (plus the bias's rounding), per element.
struct Reference {
  std::vector<double> c, bound;
};
Reference reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const std::vector<float>& a, int64_t lda,
                    const std::vector<float>& b, int64_t ldb, const float* bias) {
  Reference r{std::vector<double>(static_cast<size_t>(M * N)), std::vector<double>(static_cast<size_t>(M * N))};
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = bias ? bias[j] : 0.0, mag = bias ? std::abs(bias[j]) : 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p =
            static_cast<double>(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
        acc += p;
        mag += std::abs(p);
      }
      r.c[i * N + j] = acc;
      r.bound[i * N + j] = (K + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
    }
  return r;
}

void expect_within(const std::vector<float>& got, const Reference& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.c.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want.c[i], want.bound[i]) << what << " at " << i;
}

// A product's layout (transposes, shape, each operand's row padding) and
// its operands: bf16 values (seeded from `seed`), a bias and a c to
// accumulate onto (the next seeds).
struct Layout {
  bool ta, tb;
  int64_t M, N, K, pad;
};
struct Operands {
  int64_t lda, ldb;
  std::vector<float> a, b, bias, c0;
  std::vector<uint16_t> ah, bh;
  std::string what;  // e.g. "37x24x200 NT"
};
Operands operands_of(const Layout& t, uint64_t seed) {
  const int64_t arows = t.ta ? t.K : t.M, acols = t.ta ? t.M : t.K;
  const int64_t brows = t.tb ? t.N : t.K, bcols = t.tb ? t.K : t.N;
  Operands o{acols + t.pad, bcols + t.pad, {}, {}, {}, {}, {}, {}, {}};
  o.a = rounded(testing::uniform_values(arows * o.lda, seed));
  o.b = rounded(testing::uniform_values(brows * o.ldb, seed + 1));
  o.bias = testing::uniform_values(t.N, seed + 2);
  o.c0 = testing::uniform_values(t.M * t.N, seed + 3);
  o.ah = to_bf16(o.a);
  o.bh = to_bf16(o.b);
  o.what = std::to_string(t.M) + "x" + std::to_string(t.N) + "x" + std::to_string(t.K) + (t.ta ? " T" : " N") +
           (t.tb ? "T" : "N");
  return o;
}

// Where the CPU has bf16 instructions, products of bf16 operands run as
// oneDNN's bf16 kernels (not its reference code, not an f32 GEMM).
TEST(CpuBf16Gemm, NativePathWhereTheCpuHasIt) {
  if (!cpu_has_bf16_products()) GTEST_SKIP() << "this CPU has no AVX512-BF16 or AMX: bf16 products are emulated";
  if (const char* v = std::getenv("KILN_CPU_BF16"); v && std::string(v) == "emulate")
    GTEST_SKIP() << "KILN_CPU_BF16=emulate";
  EXPECT_TRUE(native_bf16_products());
  const std::string impl = backend::cpu::bf16_matmul_implementation();
  EXPECT_NE(impl.find("bf16"), std::string::npos) << impl;  // avx512_core_bf16, or amx with bf16 in its name
  EXPECT_NE(impl.rfind("ref", 0), 0u) << impl;
}

// The primitive itself, every layout the matmul kernel gives it: padded
// leading dimensions, transposes, a bias, accumulation into c.
TEST(CpuBf16Gemm, PrimitiveMatchesRoundedOperandsSummedInDouble) {
  if (!native_bf16_products()) GTEST_SKIP() << "bf16 products are emulated here";
  for (const Layout& t : {Layout{false, true, 37, 24, 200, 0}, Layout{false, true, 64, 16, 96, 3},
                          Layout{true, false, 29, 31, 45, 0}, Layout{false, false, 8, 50, 70, 5},
                          Layout{true, true, 17, 9, 33, 2}, Layout{false, true, 1, 40, 300, 0},
                          Layout{false, false, 256, 256, 1024, 0}}) {
    const auto [lda, ldb, a, b, bias, c0, ah, bh, what] = operands_of(t, 1);
    for (int mode = 0; mode < 3; ++mode) {  // plain, bias, accumulate
      std::vector<float> c = c0;
      const float* bp = mode == 1 ? bias.data() : mode == 2 ? c0.data() : nullptr;  // (c0's row 0 stands in)
      ASSERT_TRUE(backend::cpu::matmul_primitive_bf16(t.ta, t.tb, t.M, t.N, t.K, ah.data(), lda, bh.data(), ldb,
                                                      c.data(), t.N, mode == 1 ? bias.data() : nullptr, mode == 2))
          << what << ": oneDNN declined the layout";
      Reference want = reference(t.ta, t.tb, t.M, t.N, t.K, a, lda, b, ldb, mode == 1 ? bp : nullptr);
      if (mode == 2)
        for (size_t i = 0; i < want.c.size(); ++i) want.c[i] += c0[i], want.bound[i] += std::abs(c0[i]) * 1e-7;
      expect_within(c, want, what + (mode == 0 ? " plain" : mode == 1 ? " bias" : " accumulate"));
    }
  }
}

// The shapes the primitive runs in pieces (many rows of a transposed a, a
// long reduction): the same sums within f32 error, with the pieces and
// whole, plain, with a bias and accumulated; a bf16 result in row blocks
// rounds the f32 sums as the whole product does.
TEST(CpuBf16Gemm, ProductsRunInPiecesMatchTheWholeProduct) {
  if (!native_bf16_products()) GTEST_SKIP() << "bf16 products are emulated here";
  struct Case {
    bool ta, tb;
    int64_t M, N, K;
  };
  for (const Case& t : {Case{true, false, 17000, 5, 24}, Case{false, false, 3, 7, 26000},
                        Case{false, true, 2, 6, 12300}, Case{true, true, 8300, 3, 40}}) {
    const int64_t lda = t.ta ? t.M : t.K, ldb = t.tb ? t.K : t.N;
    const auto a = rounded(testing::uniform_values(t.M * t.K, 11)), b = rounded(testing::uniform_values(t.K * t.N, 12));
    const auto ah = to_bf16(a), bh = to_bf16(b);
    const std::vector<float> bias = testing::uniform_values(t.N, 13), c0 = testing::uniform_values(t.M * t.N, 14);
    const std::string what = std::to_string(t.M) + "x" + std::to_string(t.N) + "x" + std::to_string(t.K);
    for (int mode = 0; mode < 3; ++mode) {  // plain, bias, accumulate
      Reference want = reference(t.ta, t.tb, t.M, t.N, t.K, a, lda, b, ldb, mode == 1 ? bias.data() : nullptr);
      if (mode == 2)
        for (size_t i = 0; i < want.c.size(); ++i) want.c[i] += c0[i], want.bound[i] += std::abs(c0[i]) * 1e-7;
      for (bool pieces : {true, false}) {
        backend::cpu::set_bf16_product_pieces(pieces);
        std::vector<float> c = c0;
        const bool ran = backend::cpu::matmul_primitive_bf16(t.ta, t.tb, t.M, t.N, t.K, ah.data(), lda, bh.data(),
                                                             ldb, c.data(), t.N, mode == 1 ? bias.data() : nullptr,
                                                             mode == 2);
        backend::cpu::set_bf16_product_pieces(true);
        ASSERT_TRUE(ran) << what;
        expect_within(c, want, what + (pieces ? " in pieces" : " whole") + " mode " + std::to_string(mode));
      }
    }
    std::vector<float> f32(static_cast<size_t>(t.M * t.N));
    std::vector<uint16_t> h(f32.size());
    ASSERT_TRUE(backend::cpu::matmul_primitive_bf16(t.ta, t.tb, t.M, t.N, t.K, ah.data(), lda, bh.data(), ldb,
                                                    f32.data(), t.N, bias.data(), false));
    ASSERT_TRUE(backend::cpu::matmul_primitive_bf16(t.ta, t.tb, t.M, t.N, t.K, ah.data(), lda, bh.data(), ldb,
                                                    h.data(), t.N, bias.data()));
    const Reference sums = reference(t.ta, t.tb, t.M, t.N, t.K, a, lda, b, ldb, bias.data());
    for (size_t i = 0; i < h.size(); ++i) {  // half a bf16 step of rounding, and the f32 sums' own error
      const double got = bf16_to_float(h[i]), want = f32[i];
      ASSERT_LE(std::abs(got - want), std::abs(want) * std::ldexp(1.0, -8) + 2 * sums.bound[i])
          << what << " bf16 result at " << i;
    }
  }
}

// The 2-thread products of many rows that pack b into oneDNN's blocked
// layout first (gemm_primitive.cpp): every layout that packs, with padded
// leading dimensions and sizes off oneDNN's blocks, plain, with a bias,
// accumulated and with a bf16 result, match the rounded operands summed in
// double, packed and as stored. With AVX512-BF16 (oneDNN's
// brg:avx512_core_bf16) both run the same kernel on the same blocks: the
// same bits. With AMX, oneDNN's kernel for b as stored splits a reduction
// that is not whole blocks otherwise, so an accumulated product may differ
// in the order of its sums (within the same bound). On one thread (a paired
// product) and under 512 rows nothing is packed.
TEST(CpuBf16Gemm, PackedOperandsGiveTheBitsOfTheProductAsStored) {
  if (!native_bf16_products()) GTEST_SKIP() << "bf16 products are emulated here";
  const bool same_kernel = backend::cpu::bf16_matmul_implementation().find("amx") == std::string::npos;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(2);
  for (const Layout& t : {Layout{false, false, 600, 200, 300, 0}, Layout{false, false, 1024, 768, 64, 3},
                          Layout{false, true, 520, 700, 130, 5}, Layout{true, false, 512, 96, 1000, 0},
                          Layout{true, true, 700, 77, 33, 1}}) {
    const auto [lda, ldb, a, b, bias, c0, ah, bh, what] = operands_of(t, 21);
    ASSERT_TRUE(backend::cpu::bf16_product_packs_b(t.ta, t.tb, t.M, t.N, t.K)) << what;
    for (int mode = 0; mode < 4; ++mode) {  // plain, bias, accumulate, a bf16 result with a bias
      const float* bp = mode == 1 || mode == 3 ? bias.data() : nullptr;
      std::vector<float> c[2] = {c0, c0};
      std::vector<uint16_t> h[2] = {std::vector<uint16_t>(c0.size()), std::vector<uint16_t>(c0.size())};
      for (int packed = 0; packed < 2; ++packed) {
        backend::cpu::set_bf16_packed_operands(packed == 1);
        const bool ran = mode == 3 ? backend::cpu::matmul_primitive_bf16(t.ta, t.tb, t.M, t.N, t.K, ah.data(), lda,
                                                                         bh.data(), ldb, h[packed].data(), t.N, bp)
                                   : backend::cpu::matmul_primitive_bf16(t.ta, t.tb, t.M, t.N, t.K, ah.data(), lda,
                                                                         bh.data(), ldb, c[packed].data(), t.N, bp,
                                                                         mode == 2);
        backend::cpu::set_bf16_packed_operands(true);
        ASSERT_TRUE(ran) << what << " mode " << mode;
      }
      const std::string how = what + (mode == 0 ? " plain" : mode == 1 ? " bias" : mode == 2 ? " accumulate" : " bf16");
      if (mode == 3) {
        EXPECT_EQ(std::memcmp(h[0].data(), h[1].data(), h[0].size() * sizeof(uint16_t)), 0) << how;
        continue;
      }
      if (same_kernel || mode != 2) {
        EXPECT_EQ(std::memcmp(c[0].data(), c[1].data(), c[0].size() * sizeof(float)), 0) << how;
      }
      Reference want = reference(t.ta, t.tb, t.M, t.N, t.K, a, lda, b, ldb, bp);
      if (mode == 2)
        for (size_t i = 0; i < want.c.size(); ++i) want.c[i] += c0[i], want.bound[i] += std::abs(c0[i]) * 1e-7;
      expect_within(c[0], want, how + " as stored");
      expect_within(c[1], want, how + " packed");
    }
  }
  EXPECT_FALSE(backend::cpu::bf16_product_packs_b(false, false, 256, 768, 768));  // too few rows
  EXPECT_FALSE(backend::cpu::bf16_product_packs_b(false, true, 1024, 768, 3072));  // NT, K > N
  bool inside = true;
#pragma omp parallel num_threads(2)
#pragma omp single
  inside = backend::cpu::bf16_product_packs_b(false, false, 1024, 768, 768);
  EXPECT_FALSE(inside);  // one thread each: the paired products
  omp_set_num_threads(threads);
}

// Large products in pieces, both results, exact: small integers (periodic in
// k, so the expected sums are counted per residue) sum exactly in f32 in any
// order, so every element is checked without a reference product.
TEST(CpuBf16Gemm, LargeProductsInPiecesAreExactOnIntegers) {
  if (!native_bf16_products()) GTEST_SKIP() << "bf16 products are emulated here";
  auto av = [](int64_t i, int64_t k) { return static_cast<float>((i + k) % 3) - 1.0f; };
  auto bv = [](int64_t k, int64_t j) { return static_cast<float>((k + 2 * j) % 5) - 2.0f; };
  struct Case {
    bool ta;
    int64_t M, N, K;
  };
  for (const Case& t : {Case{false, 272, 256, 12800}, Case{true, 17000, 8, 30}}) {
    const int64_t lda = t.ta ? t.M : t.K;
    std::vector<uint16_t> a(static_cast<size_t>(t.M * t.K)), b(static_cast<size_t>(t.K * t.N));
    for (int64_t i = 0; i < t.M; ++i)
      for (int64_t k = 0; k < t.K; ++k) a[t.ta ? k * lda + i : i * lda + k] = bf16_from_float(av(i, k));
    for (int64_t k = 0; k < t.K; ++k)
      for (int64_t j = 0; j < t.N; ++j) b[k * t.N + j] = bf16_from_float(bv(k, j));
    std::vector<int64_t> count(15, 0);
    for (int64_t k = 0; k < t.K; ++k) ++count[k % 15];
    std::vector<float> f32(static_cast<size_t>(t.M * t.N));
    std::vector<uint16_t> h(f32.size());
    ASSERT_TRUE(backend::cpu::matmul_primitive_bf16(t.ta, false, t.M, t.N, t.K, a.data(), lda, b.data(), t.N,
                                                    f32.data(), t.N, nullptr, false));
    ASSERT_TRUE(backend::cpu::matmul_primitive_bf16(t.ta, false, t.M, t.N, t.K, a.data(), lda, b.data(), t.N,
                                                    h.data(), t.N, nullptr));
    for (int64_t i = 0; i < t.M; ++i)
      for (int64_t j = 0; j < t.N; ++j) {
        double want = 0;
        for (int64_t r = 0; r < 15; ++r) want += static_cast<double>(count[r]) * av(i, r) * bv(r, j);
        ASSERT_EQ(f32[i * t.N + j], want) << t.M << "x" << t.N << "x" << t.K << " at " << i << "," << j;
        ASSERT_EQ(h[i * t.N + j], bf16_from_float(static_cast<float>(want)))
            << t.M << "x" << t.N << "x" << t.K << " bf16 result at " << i << "," << j;
      }
  }
}

// Through the compiler and the matmul kernel, on whichever path this CPU
// takes and on the emulated one: a linear layer (bias folded in), a strided
// bias, batched products (attention's composite), a shared weight's
// gradient (Tᵀ·N), all of bf16 operands.
struct Products {
  std::vector<std::vector<float>> values;
  std::vector<Reference> want;
};
Products products_of_bf16_operands() {
  const int64_t B = 3, M = 40, N = 24, K = 130;
  const auto xv = rounded(testing::uniform_values(B * M * K, 5)), wv = rounded(testing::uniform_values(N * K, 6));
  const auto yv = rounded(testing::uniform_values(B * K * N, 7));
  const std::vector<float> bv = testing::uniform_values(2 * N, 8);
  Tensor x = cast(Tensor::from_vector(xv, {B, M, K}), DType::bf16), w = cast(Tensor::from_vector(wv, {N, K}), DType::bf16);
  Tensor y = cast(Tensor::from_vector(yv, {B, K, N}), DType::bf16);
  Tensor b2 = Tensor::from_vector(bv, {2 * N});
  Products p;
  p.values.push_back((matmul(x, w, false, true) + slice(b2, 0, 0, N)).to_vector<float>());
  p.want.push_back(reference(false, true, B * M, N, K, xv, K, wv, K, bv.data()));
  std::vector<float> strided;
  for (int64_t j = 0; j < N; ++j) strided.push_back(bv[2 * j]);
  p.values.push_back((matmul(x, w, false, true) + slice(b2, 0, 0, 2 * N, 2)).to_vector<float>());
  p.want.push_back(reference(false, true, B * M, N, K, xv, K, wv, K, strided.data()));
  p.values.push_back(matmul(x, y).to_vector<float>());
  Reference batched;
  for (int64_t i = 0; i < B; ++i) {
    const std::vector<float> xi(xv.begin() + i * M * K, xv.begin() + (i + 1) * M * K);
    const std::vector<float> yi(yv.begin() + i * K * N, yv.begin() + (i + 1) * K * N);
    Reference r = reference(false, false, M, N, K, xi, K, yi, N, nullptr);
    batched.c.insert(batched.c.end(), r.c.begin(), r.c.end());
    batched.bound.insert(batched.bound.end(), r.bound.begin(), r.bound.end());
  }
  p.want.push_back(batched);
  Tensor x2 = reshape(x, {B * M, K});
  p.values.push_back(matmul(x2, x2, true, false).to_vector<float>());  // [K, K]: the TN layout
  p.want.push_back(reference(true, false, K, K, B * M, xv, K, xv, K, nullptr));
  // One row (a decode step's products, our gemv): against a transposed
  // weight with a bias, a row-major one small and large enough to be summed
  // in parts, and one row per batch (attention's composite with one query).
  const std::vector<float> x1(xv.begin(), xv.begin() + K);
  Tensor r1 = slice(reshape(x, {B * M, K}), 0, 0, 1);
  p.values.push_back((matmul(r1, w, false, true) + slice(b2, 0, 0, N)).to_vector<float>());
  p.want.push_back(reference(false, true, 1, N, K, x1, K, wv, K, bv.data()));
  const int64_t wide = 1000;
  const auto zv = rounded(testing::uniform_values(K * wide, 9));
  p.values.push_back(matmul(r1, cast(Tensor::from_vector(zv, {K, wide}), DType::bf16)).to_vector<float>());
  p.want.push_back(reference(false, false, 1, wide, K, x1, K, zv, wide, nullptr));
  p.values.push_back(matmul(slice(x, 1, 0, 1), y).to_vector<float>());
  Reference rows;
  for (int64_t i = 0; i < B; ++i) {
    const std::vector<float> xi(xv.begin() + i * M * K, xv.begin() + i * M * K + K);
    const std::vector<float> yi(yv.begin() + i * K * N, yv.begin() + (i + 1) * K * N);
    Reference r = reference(false, false, 1, N, K, xi, K, yi, N, nullptr);
    rows.c.insert(rows.c.end(), r.c.begin(), r.c.end());
    rows.bound.insert(rows.bound.end(), r.bound.begin(), r.bound.end());
  }
  p.want.push_back(rows);
  return p;
}

TEST(CpuBf16Gemm, KernelProductsMatchRoundedOperandsOnBothPaths) {
  const bool was = native_bf16_products();
  for (bool native : {true, false}) {
    set_native_bf16_products(native);
    const Products p = products_of_bf16_operands();
    for (size_t i = 0; i < p.values.size(); ++i)
      expect_within(p.values[i], p.want[i],
                    std::string(native_bf16_products() ? "native" : "emulated") + ", product " + std::to_string(i));
  }
  set_native_bf16_products(was);
}

// One row of bf16 values times a row-major bf16 weight [K, N] (x·W, GPT-2's
// Conv1D in a decode step): the rows of W scaled into the result in groups
// of 32 columns, four groups a pass, the rest one at a time. Widths below a
// group, at and past whole groups and passes, a ragged end; K odd; short
// rows summed in parts and long ones (N > 4096) in column ranges per
// thread; W's rows padded (a slice of a wider weight); with and without a
// bias.
TEST(CpuBf16Gemm, OneRowTimesRowMajorWeightAtTheGroupEdges) {
  struct Case {
    int64_t N, K, pad;
  };
  for (const Case& t : {Case{1, 1, 0}, Case{31, 7, 0}, Case{32, 33, 0}, Case{33, 5, 3}, Case{128, 9, 0},
                        Case{161, 17, 1}, Case{1000, 301, 0}, Case{1023, 129, 5}, Case{4133, 77, 0},
                        Case{4500, 31, 7}}) {
    SCOPED_TRACE("N=" + std::to_string(t.N) + " K=" + std::to_string(t.K) + " pad=" + std::to_string(t.pad));
    const int64_t ldb = t.N + t.pad;
    const auto xv = rounded(testing::uniform_values(t.K, 21)), wv = rounded(testing::uniform_values(t.K * ldb, 22));
    const std::vector<float> bv = testing::uniform_values(t.N, 23);
    const Tensor x = cast(Tensor::from_vector(xv, {1, t.K}), DType::bf16);
    const Tensor w = slice(cast(Tensor::from_vector(wv, {t.K, ldb}), DType::bf16), 1, 0, t.N);
    expect_within(matmul(x, w).to_vector<float>(), reference(false, false, 1, t.N, t.K, xv, t.K, wv, ldb, nullptr),
                  "plain");
    expect_within((matmul(x, w) + Tensor::from_vector(bv, {t.N})).to_vector<float>(),
                  reference(false, false, 1, t.N, t.K, xv, t.K, wv, ldb, bv.data()), "with a bias");
  }
}

// A decode step's one-row products give the same bits on one thread and on
// several: fixed parts of K summed in order (short rows), or each column's
// sum on whichever thread owns it (long rows); bf16 and f32 weights, both
// layouts.
TEST(CpuBf16Gemm, OneRowProductsDoNotDependOnTheThreadCount) {
  struct Case {
    int64_t N, K;
  };
  const int threads = omp_get_max_threads();
  for (const Case& t : {Case{3072, 768}, Case{768, 3072}, Case{1001, 333}, Case{4133, 77}})
    for (bool tb : {false, true})
      for (DType dt : {DType::bf16, DType::f32}) {
        SCOPED_TRACE(std::string(tb ? "NT" : "NN") + " N=" + std::to_string(t.N) + " K=" + std::to_string(t.K) + " " +
                     dtype_name(dt));
        const auto xv = rounded(testing::uniform_values(t.K, 31)), wv = rounded(testing::uniform_values(t.N * t.K, 32));
        const std::vector<float> bv = testing::uniform_values(t.N, 33);
        const Tensor x = cast(Tensor::from_vector(xv, {1, t.K}), dt);
        const Tensor w = cast(Tensor::from_vector(wv, tb ? Shape{t.N, t.K} : Shape{t.K, t.N}), dt);
        const Tensor b = Tensor::from_vector(bv, {t.N});
        std::vector<std::vector<float>> runs;
        for (int n : {1, 2, 3}) {
          omp_set_num_threads(n);
          runs.push_back((matmul(x, w, false, tb) + b).to_vector<float>());
        }
        omp_set_num_threads(threads);
        for (size_t r = 1; r < runs.size(); ++r)
          ASSERT_EQ(std::memcmp(runs[r].data(), runs[0].data(), runs[0].size() * sizeof(float)), 0)
              << r + 1 << " threads against one";
      }
}

// A decode step's attention products, a bf16 row per head against its
// cache ([1,H,1,D]·[1,H,L,D]ᵀ and [1,H,1,L]·[1,H,L,D]), run the heads on the
// threads: each head's bits are those of its product alone, on any thread
// count.
TEST(CpuBf16Gemm, OneRowPerHeadGivesEachHeadsOwnProduct) {
  const int64_t H = 12, L = 1024, D = 64;
  const int threads = omp_get_max_threads();
  const Tensor q = cast(Tensor::from_vector(testing::uniform_values(H * D, 41), {1, H, 1, D}), DType::bf16);
  const Tensor p = cast(Tensor::from_vector(testing::uniform_values(H * L, 42), {1, H, 1, L}), DType::bf16);
  const Tensor k = cast(Tensor::from_vector(testing::uniform_values(H * L * D, 43), {1, H, L, D}), DType::bf16);
  for (bool scores : {true, false}) {
    SCOPED_TRACE(scores ? "q·kᵀ" : "p·v");
    auto product = [&](const Tensor& row, const Tensor& cache) { return matmul(row, cache, false, scores); };
    std::vector<float> alone;
    for (int64_t h = 0; h < H; ++h) {
      const Tensor row = slice(scores ? q : p, 1, h, h + 1);
      const std::vector<float> one = product(row, slice(k, 1, h, h + 1)).to_vector<float>();
      alone.insert(alone.end(), one.begin(), one.end());
    }
    for (int n : {1, 2, 3}) {
      omp_set_num_threads(n);
      const std::vector<float> all = product(scores ? q : p, k).to_vector<float>();
      omp_set_num_threads(threads);
      ASSERT_EQ(all.size(), alone.size());
      EXPECT_EQ(std::memcmp(all.data(), alone.data(), all.size() * sizeof(float)), 0) << n << " threads";
    }
  }
}

// An Autocast training step's gradients through both paths: the same
// within f32 summation error (the sums run in a different order).
TEST(CpuBf16Gemm, AutocastGradientsAgreeBetweenNativeAndEmulated) {
  if (!cpu_has_bf16_products()) GTEST_SKIP() << "no native path on this CPU to compare with";
  const bool was = native_bf16_products();
  auto grads = [](bool native) {
    set_native_bf16_products(native);
    Generator g(11);
    Tensor x = randn({2, 16, 96}, g), w1 = randn({192, 96}, g), w2 = randn({96, 192}, g);
    Tensor b1 = randn({192}, g);
    for (Tensor* p : {&w1, &w2, &b1}) p->requires_grad_();
    Tensor loss;
    {
      Autocast on;
      const Tensor h = linear(gelu(linear(x, w1, b1)), w2);
      loss = mean(h * h);
    }
    loss.backward();
    return std::vector<std::vector<float>>{{loss.item()}, w1.grad().to_vector<float>(), w2.grad().to_vector<float>(),
                                           b1.grad().to_vector<float>()};
  };
  const auto native = grads(true), emulated = grads(false);
  set_native_bf16_products(was);
  for (size_t t = 0; t < native.size(); ++t) {
    float largest = 0;
    for (float v : emulated[t]) largest = std::max(largest, std::abs(v));
    for (size_t i = 0; i < native[t].size(); ++i)
      // Gradients are rounded to bf16 after the products: one bf16 step
      // apart. The GELU's input is rounded to bf16 too (as torch's autocast
      // gives it), which the two paths' sums may round a step apart: a
      // difference a little larger where the terms cancel.
      ASSERT_NEAR(native[t][i], emulated[t][i], 1e-2 * std::abs(emulated[t][i]) + 2e-3 * largest)
          << "tensor " << t << " at " << i;
  }
}

}  // namespace
}  // namespace kiln
