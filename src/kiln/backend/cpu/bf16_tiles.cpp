// bf16 products of pair words with AVX512-BF16 (bf16_tiles.h). The
// functions carry their own target, so that a build for CPUs without the
// instructions (KILN_NATIVE=OFF, or built on one) still has them; callers
// run them only where cpu_has_bf16_products().
#include "kiln/backend/cpu/bf16_tiles.h"

#include <immintrin.h>

#include <cstring>

#define KILN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace kiln::backend::cpu {

namespace {

// The first n of 16 lanes.
inline __mmask16 lanes(int64_t n) { return static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1); }

inline uint32_t word_at(const uint16_t* a) {
  uint32_t w;
  std::memcpy(&w, a, sizeof w);
  return w;
}

// A tile of R rows × V vectors of 16 columns of c (the last vector's lanes
// `last`): its sums in registers over the whole reduction, B's pair rows
// read once for the R rows.
template <int R, int V>
KILN_BF16_TARGET inline void tile(int64_t K2, const uint16_t* a, int64_t a_row, int64_t a_pair, const uint32_t* b,
                                  int64_t ldb, float* c, int64_t ldc, __mmask16 last, bool accumulate) {
  __m512 s[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      s[r][v] = accumulate ? _mm512_maskz_loadu_ps(v == V - 1 ? last : 0xffff, c + r * ldc + 16 * v)
                           : _mm512_setzero_ps();
  for (int64_t p = 0; p < K2; ++p) {
    __m512bh bv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi32(v == V - 1 ? last : 0xffff, b + p * ldb + 16 * v));
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int word = static_cast<int>(word_at(a + r * a_row + p * a_pair));
      const __m512bh x = reinterpret_cast<__m512bh>(_mm512_set1_epi32(word));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) s[r][v] = _mm512_dpbf16_ps(s[r][v], x, bv[v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == V - 1 ? last : 0xffff, s[r][v]);
}

// R rows of c, 64 columns a tile, then the rest (1-63) in one tile of
// 1-4 vectors.
template <int R>
KILN_BF16_TARGET void tile_rows(int64_t N, int64_t K2, const uint16_t* a, int64_t a_row, int64_t a_pair,
                                const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  int64_t n = 0;
  for (; n + 64 <= N; n += 64) tile<R, 4>(K2, a, a_row, a_pair, b + n, ldb, c + n, ldc, 0xffff, accumulate);
  const int64_t rest = N - n;
  const __mmask16 last = lanes(rest - (rest - 1) / 16 * 16);
  switch ((rest + 15) / 16) {
    case 1: tile<R, 1>(K2, a, a_row, a_pair, b + n, ldb, c + n, ldc, last, accumulate); break;
    case 2: tile<R, 2>(K2, a, a_row, a_pair, b + n, ldb, c + n, ldc, last, accumulate); break;
    case 3: tile<R, 3>(K2, a, a_row, a_pair, b + n, ldb, c + n, ldc, last, accumulate); break;
    case 4: tile<R, 4>(K2, a, a_row, a_pair, b + n, ldb, c + n, ldc, last, accumulate); break;
    default: break;  // (none left)
  }
}

}  // namespace

// Six rows a tile (24 sums, 4 B vectors and a broadcast: 29 of the 32
// vector registers), the last 1-5 rows in a shorter one.
KILN_BF16_TARGET void tile_product(int64_t M, int64_t N, int64_t K2, const uint16_t* a, int64_t a_row,
                                   int64_t a_pair, const uint32_t* b, int64_t ldb, float* c, int64_t ldc,
                                   bool accumulate) {
  int64_t i = 0;
  for (; i + 6 <= M; i += 6) tile_rows<6>(N, K2, a + i * a_row, a_row, a_pair, b, ldb, c + i * ldc, ldc, accumulate);
  const uint16_t* ai = a + i * a_row;
  float* ci = c + i * ldc;
  switch (M - i) {
    case 1: tile_rows<1>(N, K2, ai, a_row, a_pair, b, ldb, ci, ldc, accumulate); break;
    case 2: tile_rows<2>(N, K2, ai, a_row, a_pair, b, ldb, ci, ldc, accumulate); break;
    case 3: tile_rows<3>(N, K2, ai, a_row, a_pair, b, ldb, ci, ldc, accumulate); break;
    case 4: tile_rows<4>(N, K2, ai, a_row, a_pair, b, ldb, ci, ldc, accumulate); break;
    case 5: tile_rows<5>(N, K2, ai, a_row, a_pair, b, ldb, ci, ldc, accumulate); break;
    default: break;  // (none left)
  }
}

// Two rows' 32 columns interleaved by one permute each half.
KILN_BF16_TARGET void pack_row_pairs(const uint16_t* x, int64_t ld, int64_t R, int64_t N, uint32_t* out, int64_t ldo) {
  alignas(64) static constexpr uint16_t kLow[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                    8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i low = _mm512_load_si512(kLow), high = _mm512_add_epi16(low, _mm512_set1_epi16(16));
  for (int64_t p = 0; 2 * p < R; ++p) {
    const uint16_t* x0 = x + 2 * p * ld;
    const uint16_t* x1 = 2 * p + 1 < R ? x0 + ld : nullptr;
    uint32_t* o = out + p * ldo;
    for (int64_t j = 0; j < N; j += 32) {
      const int64_t n = N - j < 32 ? N - j : 32;
      const __mmask32 m = n == 32 ? 0xffffffffu : (1u << n) - 1;
      const __m512i e = _mm512_maskz_loadu_epi16(m, x0 + j);
      const __m512i f = x1 ? _mm512_maskz_loadu_epi16(m, x1 + j) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(o + j, lanes(n), _mm512_permutex2var_epi16(e, low, f));
      if (n > 16) _mm512_mask_storeu_epi32(o + j + 16, lanes(n - 16), _mm512_permutex2var_epi16(e, high, f));
    }
  }
}

// (GCC 12's AVX-512 unpack intrinsics pass an undefined vector as their
// unused merge source, which -Wmaybe-uninitialized reports.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Tiles of 16 rows × 16 words: each row's 32 elements in one (masked) load,
// the 16 × 16 words transposed in registers (interleaving words, then word
// pairs, then 128-bit lanes twice), each word column stored as 16 rows.
KILN_BF16_TARGET void pack_column_pairs(const uint16_t* x, int64_t ld, int64_t R, int64_t C, uint32_t* out,
                                        int64_t ldo) {
  const int64_t C2 = (C + 1) / 2;
  for (int64_t j0 = 0; j0 < R; j0 += 16) {
    const int64_t rows = R - j0 < 16 ? R - j0 : 16;
    for (int64_t p0 = 0; p0 < C2; p0 += 16) {
      const int64_t n = C - 2 * p0 < 32 ? C - 2 * p0 : 32, words = C2 - p0 < 16 ? C2 - p0 : 16;
      const __mmask32 m = n == 32 ? 0xffffffffu : (1u << n) - 1;
      __m512i r[16], t[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        r[i] = i < rows ? _mm512_maskz_loadu_epi16(m, x + (j0 + i) * ld + 2 * p0) : _mm512_setzero_si512();
      // t[4k + c], 128-bit lane L: rows 4k..4k+3 of word 4L + c
#pragma GCC unroll 8
      for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
      }
      const __mmask16 keep = lanes(rows);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m512i a0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), a1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        const __m512i b0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88),
                      b1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        const __m512i word[4] = {_mm512_shuffle_i32x4(a0, b0, 0x88), _mm512_shuffle_i32x4(a1, b1, 0x88),
                                 _mm512_shuffle_i32x4(a0, b0, 0xdd), _mm512_shuffle_i32x4(a1, b1, 0xdd)};
#pragma GCC unroll 4
        for (int q = 0; q < 4; ++q)  // words c, 4 + c, 8 + c, 12 + c
          if (4 * q + c < words) _mm512_mask_storeu_epi32(out + (p0 + 4 * q + c) * ldo + j0, keep, word[q]);
      }
    }
  }
}
#pragma GCC diagnostic pop

}  // namespace kiln::backend::cpu
