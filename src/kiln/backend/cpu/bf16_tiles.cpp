// bf16 products of pair words with AVX512-BF16 or AMX (bf16_tiles.h). The
// functions carry their own target, so that a build for CPUs without the
// instructions (KILN_NATIVE=OFF, or built on one) still has them; callers
// run them only where cpu_has_bf16_products(), and the AMX ones only where
// amx_usable().
#include "kiln/backend/cpu/bf16_tiles.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "kiln/core/env.h"

#define KILN_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define KILN_AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

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

// AMX: eight tile registers of 16 rows × 64 bytes. TDPBF16PS adds to each
// f32 element of a C tile (16 × 16) the products of an A tile's row (16
// pair words) and a B tile's column (16 pair words, a row of B a pair row):
// the pair-word layout of bf16_tiles.h, read by tile loads with any row
// stride. Every tile is configured whole; operands off whole tiles are
// copied into zero-padded buffers (a zero pair adds 0 to a sum; padded rows
// and columns of C are not stored).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

constexpr int64_t kTile = 16;  // rows of a tile, and its 64 bytes in words
inline int64_t whole_tiles(int64_t n) { return (n + kTile - 1) / kTile * kTile; }

// 2 × 2 C tiles (tmm0-3: rows r, columns c), A's strips in tmm4-5, B's in
// tmm6-7, over the whole reduction; strips past M or N (R, C = 1) skipped.
// a: tiles' rows lda words apart (K2p words a row); b: pair rows ldb words
// apart; c: f32 rows ldc apart, or the 16 × 16 staging blocks `edge`
// where a tile is not whole inside c.
template <int R, int C>
KILN_AMX_TARGET void amx_block(int64_t K2p, const uint32_t* a, int64_t lda, const uint32_t* b, int64_t ldb, float* c,
                               int64_t ldc, int64_t rows, int64_t cols, bool accumulate, float (*edge)[kTile * kTile]) {
  // Each C tile's place: c itself, or its staging block (with the valid part copied in and out).
  float* at[2][2];
  int64_t ld[2][2];
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < C; ++q) {
      const int64_t nr = std::min(kTile, rows - kTile * r), nc = std::min(kTile, cols - kTile * q);
      float* home = c + kTile * (r * ldc + q);
      if (nr == kTile && nc == kTile) {
        at[r][q] = home, ld[r][q] = ldc;
        continue;
      }
      float* e = edge[2 * r + q];
      std::fill(e, e + kTile * kTile, 0.0f);
      if (accumulate)
        for (int64_t i = 0; i < nr; ++i) std::copy(home + i * ldc, home + i * ldc + nc, e + i * kTile);
      at[r][q] = e, ld[r][q] = kTile;
    }
  auto bytes = [](int64_t words) { return static_cast<long>(words * 4); };
  if (accumulate) {
    _tile_loadd(0, at[0][0], bytes(ld[0][0]));
    if constexpr (C == 2) _tile_loadd(1, at[0][1], bytes(ld[0][1]));
    if constexpr (R == 2) _tile_loadd(2, at[1][0], bytes(ld[1][0]));
    if constexpr (R == 2 && C == 2) _tile_loadd(3, at[1][1], bytes(ld[1][1]));
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t k = 0; k < K2p; k += kTile) {
    _tile_loadd(4, a + k, bytes(lda));
    _tile_loadd(6, b + k * ldb, bytes(ldb));
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (C == 2) {
      _tile_loadd(7, b + k * ldb + kTile, bytes(ldb));
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (R == 2) {
      _tile_loadd(5, a + kTile * lda + k, bytes(lda));
      _tile_dpbf16ps(2, 5, 6);
    }
    if constexpr (R == 2 && C == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, at[0][0], bytes(ld[0][0]));
  if constexpr (C == 2) _tile_stored(1, at[0][1], bytes(ld[0][1]));
  if constexpr (R == 2) _tile_stored(2, at[1][0], bytes(ld[1][0]));
  if constexpr (R == 2 && C == 2) _tile_stored(3, at[1][1], bytes(ld[1][1]));
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < C; ++q) {
      if (at[r][q] != edge[2 * r + q]) continue;
      const int64_t nr = std::min(kTile, rows - kTile * r), nc = std::min(kTile, cols - kTile * q);
      float* home = c + kTile * (r * ldc + q);
      for (int64_t i = 0; i < nr; ++i) std::copy(at[r][q] + i * kTile, at[r][q] + i * kTile + nc, home + i * ldc);
    }
}

// A as whole tiles: in place where its rows are pair words side by side
// (a_pair 2) and M and K2 are whole tiles, else copied (rows M..Mp and
// words K2..K2p zero): a row at a time, or where consecutive rows' words
// are side by side (a_row 2, the attention's transposed operands) 16 × 16
// words transposed at a time.
const uint32_t* amx_a_operand(int64_t M, int64_t K2, const uint16_t* a, int64_t a_row, int64_t a_pair,
                              std::vector<uint32_t>& buf, int64_t& lda) {
  const int64_t K2p = whole_tiles(K2);
  if (a_pair == 2 && M % kTile == 0 && K2 == K2p && a_row % 2 == 0) {
    lda = a_row / 2;
    return reinterpret_cast<const uint32_t*>(a);
  }
  lda = K2p;
  buf.assign(static_cast<size_t>(whole_tiles(M) * K2p), 0u);
  if (a_pair == 2) {
    for (int64_t i = 0; i < M; ++i) std::memcpy(buf.data() + i * K2p, a + i * a_row, static_cast<size_t>(K2) * 4);
  } else if (a_row == 2) {
    pack_column_pairs(a, a_pair, K2, 2 * M, buf.data(), K2p);
  } else {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t p = 0; p < K2; ++p) std::memcpy(buf.data() + i * K2p + p, a + i * a_row + p * a_pair, 4);
  }
  return buf.data();
}

// B as whole tiles: in place where N and K2 are, else copied (columns
// N..Np and pair rows K2..K2p zero).
const uint32_t* amx_b_operand(int64_t N, int64_t K2, const uint32_t* b, int64_t ldb, std::vector<uint32_t>& buf,
                              int64_t& ld) {
  if (N % kTile == 0 && K2 % kTile == 0) {
    ld = ldb;
    return b;
  }
  ld = whole_tiles(N);
  buf.assign(static_cast<size_t>(whole_tiles(K2) * ld), 0u);
  for (int64_t p = 0; p < K2; ++p) std::memcpy(buf.data() + p * ld, b + p * ldb, static_cast<size_t>(N) * 4);
  return buf.data();
}

KILN_AMX_TARGET void amx_product(int64_t M, int64_t N, int64_t K2, const uint16_t* a, int64_t a_row, int64_t a_pair,
                                 const uint32_t* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  thread_local std::vector<uint32_t> abuf, bbuf;
  alignas(64) float edge[4][kTile * kTile];
  int64_t lda = 0, ldbp = 0;
  const uint32_t* ap = amx_a_operand(M, K2, a, a_row, a_pair, abuf, lda);
  const uint32_t* bp = amx_b_operand(N, K2, b, ldb, bbuf, ldbp);
  const int64_t K2p = whole_tiles(K2);
  // (Configured at every call: oneDNN's AMX kernels load their own shapes on the same thread.)
  TileConfig config;
  for (int t = 0; t < 8; ++t) config.rows[t] = kTile, config.colsb[t] = 4 * kTile;
  _tile_loadconfig(&config);
  for (int64_t j = 0; j < N; j += 2 * kTile) {
    const bool two_cols = N - j > kTile;
    for (int64_t i = 0; i < M; i += 2 * kTile) {
      const bool two_rows = M - i > kTile;
      const uint32_t* ai = ap + i * lda;
      const uint32_t* bj = bp + j;
      float* cij = c + i * ldc + j;
      if (two_rows && two_cols)
        amx_block<2, 2>(K2p, ai, lda, bj, ldbp, cij, ldc, M - i, N - j, accumulate, edge);
      else if (two_rows)
        amx_block<2, 1>(K2p, ai, lda, bj, ldbp, cij, ldc, M - i, N - j, accumulate, edge);
      else if (two_cols)
        amx_block<1, 2>(K2p, ai, lda, bj, ldbp, cij, ldc, M - i, N - j, accumulate, edge);
      else
        amx_block<1, 1>(K2p, ai, lda, bj, ldbp, cij, ldc, M - i, N - j, accumulate, edge);
    }
  }
  _tile_release();
}

// KILN_CPU_AMX: auto (AMX where the CPU has it and the kernel grants it) or
// off (AVX512-BF16).
std::atomic<int> g_amx{-1};  // -1: not decided yet

}  // namespace

bool amx_usable() {
  static const bool usable = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
    if ((edx & (kAmxBf16 | kAmxTile)) != (kAmxBf16 | kAmxTile)) return false;
    // Linux gives a process the tiles' register state only when it asks
    // (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); a kernel
    // without AMX support refuses.
    constexpr long kRequestPermission = 0x1023, kTileData = 18;
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return usable;
}

bool amx_tiles() {
  int v = g_amx.load();
  if (v < 0) {
    const int decided = amx_usable() && env_choice("KILN_CPU_AMX", {"auto", "off"}) == "auto" ? 1 : 0;
    v = g_amx.compare_exchange_strong(v, decided) ? decided : g_amx.load();  // a setter wins
  }
  return v == 1;
}

void set_amx_tiles(bool on) { g_amx.store(on && amx_usable() ? 1 : 0); }

// AMX where amx_tiles(); else six rows a tile (24 sums, 4 B vectors and a
// broadcast: 29 of the 32 vector registers), the last 1-5 rows in a shorter
// one.
KILN_BF16_TARGET void tile_product(int64_t M, int64_t N, int64_t K2, const uint16_t* a, int64_t a_row,
                                   int64_t a_pair, const uint32_t* b, int64_t ldb, float* c, int64_t ldc,
                                   bool accumulate) {
  if (M > 0 && N > 0 && K2 > 0 && amx_tiles())
    return amx_product(M, N, K2, a, a_row, a_pair, b, ldb, c, ldc, accumulate);
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
