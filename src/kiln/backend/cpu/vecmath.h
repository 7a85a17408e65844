#pragma once
// Vectorised float math for the fused interpreter: glibc's libmvec (AVX2
// variants, ≤ 4 ulp) where the build targets AVX2, the scalar libm otherwise.
// r and a may alias.
#include <cmath>
#include <cstdint>

#if defined(__AVX2__) && defined(__x86_64__)
#include <immintrin.h>
extern "C" {
__m256 _ZGVdN8v_expf(__m256);
__m256 _ZGVdN8v_logf(__m256);
__m256 _ZGVdN8v_tanhf(__m256);
__m256 _ZGVdN8v_erff(__m256);
}
#define KILN_HAVE_LIBMVEC 1
#endif

namespace kiln::backend::cpu::vec {

#ifdef KILN_HAVE_LIBMVEC
#define KILN_VEC_FN(NAME, VEC, SCALAR)                                          \
  inline void NAME(const float* a, float* r, int64_t n) {                       \
    int64_t j = 0;                                                              \
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(r + j, VEC(_mm256_loadu_ps(a + j))); \
    for (; j < n; ++j) r[j] = SCALAR(a[j]);                                     \
  }
KILN_VEC_FN(log, _ZGVdN8v_logf, std::log)
KILN_VEC_FN(tanh, _ZGVdN8v_tanhf, std::tanh)
KILN_VEC_FN(erf, _ZGVdN8v_erff, std::erf)
#undef KILN_VEC_FN

// libmvec's expf sends lanes below -87.33654 (its range check, 0x42AEAC4F)
// through the scalar expf, 13x slower per element (measured on vectors of
// such inputs), and masked attention scores are -FLT_MAX: GPT-2's causal
// softmax spent 2.5x BERT's time per element. Below -104 the float result is 0 (under half the
// least subnormal); between, the scalar expf gives the subnormal results, as
// libmvec's own fallback does: the values are libmvec's, bit for bit.
inline void exp(const float* a, float* r, int64_t n) {
  const __m256 fast_min = _mm256_set1_ps(-0x1.5d589ep+6f), zero_below = _mm256_set1_ps(-104.0f);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_loadu_ps(a + j);
    const __m256 low = _mm256_cmp_ps(x, fast_min, _CMP_LT_OQ);
    if (_mm256_testz_ps(low, low)) {
      _mm256_storeu_ps(r + j, _ZGVdN8v_expf(x));
      continue;
    }
    const __m256 zero = _mm256_cmp_ps(x, zero_below, _CMP_LT_OQ);
    const __m256 y = _mm256_blendv_ps(_ZGVdN8v_expf(_mm256_blendv_ps(x, fast_min, low)), _mm256_setzero_ps(), zero);
    alignas(32) float xs[8], ys[8];
    _mm256_store_ps(xs, x);
    _mm256_store_ps(ys, y);
    for (int mask = _mm256_movemask_ps(_mm256_andnot_ps(zero, low)); mask; mask &= mask - 1) {
      const int l = __builtin_ctz(static_cast<unsigned>(mask));
      ys[l] = std::exp(xs[l]);
    }
    _mm256_storeu_ps(r + j, _mm256_load_ps(ys));
  }
  for (; j < n; ++j) r[j] = std::exp(a[j]);
}
#else
inline void exp(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::exp(a[j]); }
inline void log(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::log(a[j]); }
inline void tanh(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::tanh(a[j]); }
inline void erf(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::erf(a[j]); }
#endif

}  // namespace kiln::backend::cpu::vec
