// bf16 products on pair words (backend/cpu/bf16_tiles.h), the fused
// attention's block products on a CPU with AVX512-BF16 or AMX: the
// packers' words bit for bit, and products of every tile shape (rows and
// columns past whole tiles, odd reductions, accumulation) against the bf16
// operands multiplied and summed in double, within f32 summation error, on
// both kinds of tiles where the CPU has AMX.
#include "kiln/backend/cpu/bf16_tiles.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/core/bf16.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using backend::cpu::pack_column_pairs;
using backend::cpu::tile_product;
using backend::cpu::cpu_has_bf16_products;
using backend::cpu::pack_row_pairs;

// n bf16 values (their bits) in [-2, 2).
std::vector<uint16_t> bf16_bits(int64_t n, unsigned seed) {
  const std::vector<float> v = testing::uniform_values(n, seed, -2.0f, 2.0f);
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_from_float(v[i]);
  return h;
}

TEST(Bf16Tiles, PackersLayWordsAsDocumented) {
  if (!cpu_has_bf16_products()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  for (int64_t R : {1, 2, 7, 16, 33})
    for (int64_t C : {1, 2, 5, 32, 47, 64, 70}) {
      SCOPED_TRACE(std::to_string(R) + " rows x " + std::to_string(C) + " columns");
      const int64_t ld = C + 3;
      const std::vector<uint16_t> x = bf16_bits(R * ld, 1);
      auto at = [&](int64_t r, int64_t c) -> uint32_t { return r < R && c < C ? x[r * ld + c] : 0u; };
      const int64_t R2 = (R + 1) / 2, C2 = (C + 1) / 2;
      std::vector<uint32_t> rows(static_cast<size_t>(R2 * (C + 1)), 0xdeadbeef);
      pack_row_pairs(x.data(), ld, R, C, rows.data(), C + 1);
      for (int64_t p = 0; p < R2; ++p)
        for (int64_t j = 0; j <= C; ++j)
          ASSERT_EQ(rows[p * (C + 1) + j], j < C ? at(2 * p, j) | at(2 * p + 1, j) << 16 : 0xdeadbeefu)
              << "pack_row_pairs word (" << p << ", " << j << ")";
      std::vector<uint32_t> cols(static_cast<size_t>(C2 * (R + 2)), 0xdeadbeef);
      pack_column_pairs(x.data(), ld, R, C, cols.data(), R + 2);
      for (int64_t p = 0; p < C2; ++p)
        for (int64_t j = 0; j < R + 2; ++j)
          ASSERT_EQ(cols[p * (R + 2) + j], j < R ? at(j, 2 * p) | at(j, 2 * p + 1) << 16 : 0xdeadbeefu)
              << "pack_column_pairs word (" << p << ", " << j << ")";
    }
}

// c = a·b for a (M × K) and b (K × N) stored row-major as bf16: a packed
// with pack_column_pairs (an A operand: row 2, pair 2·M) or (K even) read in
// place (row K, pair 2) or strided otherwise (row 4, pair 4·M), b packed
// with pack_row_pairs; on the AVX512-BF16 tiles or (amx) on AMX tiles.
void expect_products_match(bool amx) {
  const bool was = backend::cpu::amx_tiles();
  backend::cpu::set_amx_tiles(amx);
  ASSERT_EQ(backend::cpu::amx_tiles(), amx);
  // (Rows and columns past whole register tiles (6 × 64) and AMX tiles
  // (16 × 16, two by two), reductions past whole AMX tiles (32).)
  for (int64_t M : {1, 5, 6, 13, 16, 32, 47, 64})
    for (int64_t N : {1, 16, 17, 48, 63, 64, 100, 130})
      for (int64_t K : {0, 1, 2, 7, 64, 96, 301})
        for (int mode = 0; mode < 6; ++mode) {
          const bool accumulate = mode % 2 == 1, in_place = mode / 2 == 1, strided = mode / 2 == 2;
          const std::string what = std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K) +
                                   (accumulate ? " accumulated" : "") + (in_place ? " in place" : "") +
                                   (strided ? " strided" : "") + (amx ? " (AMX)" : " (AVX512-BF16)");
          const std::vector<uint16_t> a = bf16_bits(M * K, 2), b = bf16_bits(K * N, 3);
          const int64_t K2 = (K + 1) / 2;
          std::vector<uint32_t> ap(static_cast<size_t>(std::max<int64_t>(K2 * M, 1))),
              bp(static_cast<size_t>(std::max<int64_t>(K2 * N, 1)));
          pack_column_pairs(a.data(), K, M, K, ap.data(), M);
          pack_row_pairs(b.data(), N, K, N, bp.data(), N);
          const int64_t ldc = N + 5;
          const std::vector<float> c0 = testing::uniform_values(M * ldc, 4);
          std::vector<float> c = c0;
          // Any other layout: word (i, p) every other word, p-major (row 4, pair 4·M).
          std::vector<uint32_t> as(static_cast<size_t>(std::max<int64_t>(2 * K2 * M, 1)), 0xdeadbeef);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t p = 0; p < K2; ++p) as[2 * (p * M + i)] = ap[p * M + i];
          if (K % 2 == 0 && in_place)  // a's rows read in place
            tile_product(M, N, K2, a.data(), K, 2, bp.data(), N, c.data(), ldc, accumulate);
          else if (strided)
            tile_product(M, N, K2, reinterpret_cast<const uint16_t*>(as.data()), 4, 4 * M, bp.data(), N, c.data(),
                         ldc, accumulate);
          else
            tile_product(M, N, K2, reinterpret_cast<const uint16_t*>(ap.data()), 2, 2 * M, bp.data(), N, c.data(),
                         ldc, accumulate);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              const float got = c[i * ldc + j];
              if (j >= N) {
                ASSERT_EQ(got, c0[i * ldc + j]) << what << ": wrote past column " << N;
                continue;
              }
              double want = accumulate ? c0[i * ldc + j] : 0.0, mag = std::abs(want);
              for (int64_t k = 0; k < K; ++k) {
                const double p = static_cast<double>(bf16_to_float(a[i * K + k])) * bf16_to_float(b[k * N + j]);
                want += p;
                mag += std::abs(p);
              }
              ASSERT_NEAR(got, want, (K + 2) * std::ldexp(mag, -24) + 1e-30)
                  << what << " at (" << i << ", " << j << ")";
            }
        }
  backend::cpu::set_amx_tiles(was);
}

TEST(Bf16Tiles, ProductsMatchBf16OperandsSummedInDouble) {
  if (!cpu_has_bf16_products()) GTEST_SKIP() << "this CPU has no AVX512-BF16";
  expect_products_match(false);
}

TEST(Bf16Tiles, AmxProductsMatchBf16OperandsSummedInDouble) {
  if (!cpu_has_bf16_products() || !backend::cpu::amx_usable()) GTEST_SKIP() << "this CPU has no AMX";
  expect_products_match(true);
}

}  // namespace
}  // namespace kiln
