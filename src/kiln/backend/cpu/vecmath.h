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
KILN_VEC_FN(exp, _ZGVdN8v_expf, std::exp)
KILN_VEC_FN(log, _ZGVdN8v_logf, std::log)
KILN_VEC_FN(tanh, _ZGVdN8v_tanhf, std::tanh)
KILN_VEC_FN(erf, _ZGVdN8v_erff, std::erf)
#undef KILN_VEC_FN
#else
inline void exp(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::exp(a[j]); }
inline void log(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::log(a[j]); }
inline void tanh(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::tanh(a[j]); }
inline void erf(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::erf(a[j]); }
#endif

}  // namespace kiln::backend::cpu::vec
