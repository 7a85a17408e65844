#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"): a counter-based generator. Element i of a random tensor depends only
// on (seed, offset, i), so streams are reproducible whatever the number of
// threads or replicas.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kiln/backend/philox_core.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace kiln::backend::cpu {

struct Philox {
  static inline void round(uint32_t c[4], uint32_t k[2]) { philox_round(c, k); }
  // Four 32-bit random words for element `index` of the stream (seed, offset).
  static inline void generate(uint64_t seed, uint64_t offset, uint64_t index, uint32_t out[4]) {
    philox_block(seed, offset, index, out);
  }
  // Element i of a stream uses word i % 4 of block i / 4 (uniform) or the
  // pair (i % 2) of block i / 2 (normal), so a block's 10 rounds serve 4 (2)
  // elements.
  static inline float to_uniform(uint32_t w) { return philox_to_uniform(w); }
  static inline float to_normal(uint32_t a, uint32_t b) { return philox_to_normal(a, b); }
  // U[0, 1) with 24 bits, element `index`.
  static inline float uniform(uint64_t seed, uint64_t offset, uint64_t index) {
    return philox_uniform(seed, offset, index);
  }
  // N(0, 1) by Box-Muller on two words, element `index`.
  static inline float normal(uint64_t seed, uint64_t offset, uint64_t index) {
    return philox_normal(seed, offset, index);
  }
  // kLanes consecutive blocks at once; out[k][l] = word k of block block0 + l.
  // (The build targets its own CPU, -march=native: 16 lanes with AVX-512, 8
  // with AVX2. Integer arithmetic only, so every path gives the same words.)
#ifdef __AVX512F__
  // (GCC 12 warns, wrongly, that the "undefined" pass-through operand inside
  // many AVX-512 intrinsics may be used uninitialised.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
  static constexpr int kLanes = 16;
#else
  static constexpr int kLanes = 8;
#endif
  // Philox's 10 rounds (philox_round) on vectors of counters, one block a
  // lane: mul(x, m, hi, lo) gives the high and low words of each lane's
  // 32x32->64-bit product, xor_key(a, b, k) = a ^ b ^ k in every lane.
  template <typename V, typename Mul, typename XorKey>
  static inline void rounds(V& c0, V& c1, V& c2, V& c3, V m0, V m1, uint64_t seed, Mul mul, XorKey xor_key) {
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      V hi0, lo0, hi1, lo1;
      mul(c0, m0, hi0, lo0);
      mul(c2, m1, hi1, lo1);
      c0 = xor_key(hi1, c1, k0);
      c2 = xor_key(hi0, c3, k1);
      c1 = lo1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
  }
  static inline void generate_lanes(uint64_t seed, uint64_t offset, uint64_t block0, uint32_t out[4][kLanes]) {
#ifdef __AVX512F__
    // As the AVX2 path below, in zmm registers; the carry compare is unsigned.
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i base_lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(block0)));
    __m512i c0 = _mm512_add_epi32(base_lo, lane);
    const __mmask16 wrapped = _mm512_cmplt_epu32_mask(c0, base_lo);
    const __m512i base_hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(block0 >> 32)));
    __m512i c1 = _mm512_mask_add_epi32(base_hi, wrapped, base_hi, _mm512_set1_epi32(1));
    __m512i c2 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(offset)));
    __m512i c3 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(offset >> 32)));
    const __m512i m0 = _mm512_set1_epi64(0xD2511F53u), m1 = _mm512_set1_epi64(0xCD9E8D57u);
    // hi, lo: the high and low words of the 32x32->64-bit products, lane by
    // lane. even (odd) holds the even (odd) lanes' products as 64-bit words;
    // each word's halves go to their lanes by a masked in-lane shuffle (one
    // instruction where shifting and blending took two), and the three-way
    // xor is one vpternlogd: ~23 % faster than shifts, blends and two xors.
    auto mul = [](__m512i x, __m512i m, __m512i& hi, __m512i& lo) {
      const __m512i even = _mm512_mul_epu32(x, m);
      const __m512i odd = _mm512_mul_epu32(_mm512_shuffle_epi32(x, _MM_PERM_DDBB), m);  // lanes 1, 3 to 0, 2
      lo = _mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CCAA);  // odd lanes: odd's low words
      hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_DDBB);  // even lanes: even's high words
    };
    auto xor_key = [](__m512i a, __m512i b, uint32_t k) {
      return _mm512_ternarylogic_epi32(a, b, _mm512_set1_epi32(static_cast<int>(k)), 0x96);  // a ^ b ^ k
    };
    rounds(c0, c1, c2, c3, m0, m1, seed, mul, xor_key);
    _mm512_storeu_si512(out[0], c0);
    _mm512_storeu_si512(out[1], c1);
    _mm512_storeu_si512(out[2], c2);
    _mm512_storeu_si512(out[3], c3);
#elif defined(__AVX2__)
    // Eight blocks in the lanes of AVX2 registers; the 32x32->64-bit products
    // of even and odd lanes come from two vpmuludq each.
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i base_lo = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(block0)));
    __m256i c0 = _mm256_add_epi32(base_lo, lane);
    // Carry into the high word where the low word wrapped.
    const __m256i wrapped = _mm256_cmpgt_epi32(_mm256_xor_si256(base_lo, _mm256_set1_epi32(INT32_MIN)),
                                               _mm256_xor_si256(c0, _mm256_set1_epi32(INT32_MIN)));
    __m256i c1 = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(block0 >> 32))), wrapped);
    __m256i c2 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(offset)));
    __m256i c3 = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(offset >> 32)));
    const __m256i m0 = _mm256_set1_epi64x(0xD2511F53u), m1 = _mm256_set1_epi64x(0xCD9E8D57u);
    const __m256i low = _mm256_set1_epi64x(0xFFFFFFFFll), high = _mm256_set1_epi64x(static_cast<long long>(0xFFFFFFFF00000000ull));
    auto mul = [&](__m256i x, __m256i m, __m256i& hi, __m256i& lo) {
      __m256i even = _mm256_mul_epu32(x, m), odd = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
      lo = _mm256_or_si256(_mm256_and_si256(even, low), _mm256_slli_epi64(odd, 32));
      hi = _mm256_or_si256(_mm256_srli_epi64(even, 32), _mm256_and_si256(odd, high));
    };
    auto xor_key = [](__m256i a, __m256i b, uint32_t k) {
      return _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_set1_epi32(static_cast<int>(k)));
    };
    rounds(c0, c1, c2, c3, m0, m1, seed, mul, xor_key);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[0]), c0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[1]), c1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[2]), c2);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[3]), c3);
#else
    for (int l = 0; l < kLanes; ++l) {
      uint32_t w[4];
      generate(seed, offset, block0 + static_cast<uint64_t>(l), w);
      for (int k = 0; k < 4; ++k) out[k][l] = w[k];
    }
#endif
  }
#ifdef __AVX512F__
  // out[4l + k] = to_uniform(lanes[k][l]) for the 64 words: the AVX2 path's
  // transpose within each 128-bit lane, then the lanes put in block order.
  static inline void store_uniform_lanes(const uint32_t lanes[4][kLanes], float* out) {
    const __m512i c0 = _mm512_loadu_si512(lanes[0]), c1 = _mm512_loadu_si512(lanes[1]);
    const __m512i c2 = _mm512_loadu_si512(lanes[2]), c3 = _mm512_loadu_si512(lanes[3]);
    const __m512i t0 = _mm512_unpacklo_epi32(c0, c1), t1 = _mm512_unpackhi_epi32(c0, c1);
    const __m512i t2 = _mm512_unpacklo_epi32(c2, c3), t3 = _mm512_unpackhi_epi32(c2, c3);
    // 128-bit lane L of u0 (u1, u2, u3): block 4L (4L + 1, 4L + 2, 4L + 3)
    const __m512i u0 = _mm512_unpacklo_epi64(t0, t2), u1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i u2 = _mm512_unpacklo_epi64(t1, t3), u3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i a = _mm512_shuffle_i32x4(u0, u1, 0x44), b = _mm512_shuffle_i32x4(u2, u3, 0x44);  // lanes 0, 1
    const __m512i c = _mm512_shuffle_i32x4(u0, u1, 0xEE), d = _mm512_shuffle_i32x4(u2, u3, 0xEE);  // lanes 2, 3
    const __m512 scale = _mm512_set1_ps(1.0f / 16777216.0f);
    auto put = [&](__m512i w, float* o) {
      _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(w, 8)), scale));
    };
    put(_mm512_shuffle_i32x4(a, b, 0x88), out);       // blocks 0-3
    put(_mm512_shuffle_i32x4(a, b, 0xDD), out + 16);  // blocks 4-7
    put(_mm512_shuffle_i32x4(c, d, 0x88), out + 32);  // blocks 8-11
    put(_mm512_shuffle_i32x4(c, d, 0xDD), out + 48);  // blocks 12-15
  }
#elif defined(__AVX2__)
  // out[4l + k] = to_uniform(lanes[k][l]) for the 32 words: a 4x8 transpose
  // in registers, then (w >> 8) * 2^-24 (exact, as to_uniform).
  static inline void store_uniform_lanes(const uint32_t lanes[4][kLanes], float* out) {
    const __m256i c0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes[0]));
    const __m256i c1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes[1]));
    const __m256i c2 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes[2]));
    const __m256i c3 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes[3]));
    const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
    const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
    // u0: blocks 0 | 4, u1: 1 | 5, u2: 2 | 6, u3: 3 | 7 (each block's 4 words)
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256 scale = _mm256_set1_ps(1.0f / 16777216.0f);
    auto put = [&](__m256i w, float* o) {
      _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 8)), scale));
    };
    put(_mm256_permute2x128_si256(u0, u1, 0x20), out);
    put(_mm256_permute2x128_si256(u2, u3, 0x20), out + 8);
    put(_mm256_permute2x128_si256(u0, u1, 0x31), out + 16);
    put(_mm256_permute2x128_si256(u2, u3, 0x31), out + 24);
  }
#endif
  // Elements [first, first + n) of a stream into out: whole groups of blocks
  // in lockstep, the ragged ends one block at a time (the same values).
  template <typename T>
  static void uniform_range(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, T* out) {
    uint32_t w[4];
    int64_t j = 0;
    while (j < n && ((first + static_cast<uint64_t>(j)) & 3) != 0) {  // to a block boundary
      const uint64_t i = first + static_cast<uint64_t>(j);
      generate(seed, offset, i >> 2, w);
      out[j++] = static_cast<T>(to_uniform(w[i & 3]));
    }
    alignas(64) uint32_t lanes[4][kLanes];
    for (; j + 4 * kLanes <= n; j += 4 * kLanes) {
      generate_lanes(seed, offset, (first + static_cast<uint64_t>(j)) >> 2, lanes);
#ifdef __AVX2__
      if constexpr (std::is_same_v<T, float>) {
        store_uniform_lanes(lanes, out + j);
        continue;
      }
#endif
      for (int l = 0; l < kLanes; ++l)
        for (int k = 0; k < 4; ++k) out[j + 4 * l + k] = static_cast<T>(to_uniform(lanes[k][l]));
    }
#ifdef __AVX2__
    if constexpr (std::is_same_v<T, float>) {
      if (n - j > 8) {  // a short ragged end (an attention row's last keys): one more group, partly kept
        alignas(64) float group[4 * kLanes];
        generate_lanes(seed, offset, (first + static_cast<uint64_t>(j)) >> 2, lanes);
        store_uniform_lanes(lanes, group);
        std::copy(group, group + (n - j), out + j);
        return;
      }
    }
#endif
    for (; j < n;) {
      const uint64_t i = first + static_cast<uint64_t>(j);
      generate(seed, offset, i >> 2, w);
      for (uint64_t k = i & 3; k < 4 && j < n; ++k, ++j) out[j] = static_cast<T>(to_uniform(w[k]));
    }
  }
  template <typename T>
  static void normal_range(uint64_t seed, uint64_t offset, uint64_t first, int64_t n, T* out) {
    uint32_t w[4];
    for (int64_t j = 0; j < n;) {
      const uint64_t i = first + static_cast<uint64_t>(j);
      generate(seed, offset, i >> 1, w);
      for (uint64_t k = i & 1; k < 2 && j < n; ++k, ++j) out[j] = static_cast<T>(to_normal(w[2 * k], w[2 * k + 1]));
    }
  }
};
#ifdef __AVX512F__
#pragma GCC diagnostic pop
#endif

}  // namespace kiln::backend::cpu
