#pragma once
// Vectorised float math for the fused interpreter and the compiled loops:
// glibc's libmvec (AVX2 variants, ≤ 4 ulp) where the build targets AVX2, the
// scalar libm otherwise. r and a may alias.
#include <cmath>
#include <cstdint>

#include "kiln/backend/elementwise.h"
#include "kiln/ir/op.h"

#if defined(__AVX2__) && defined(__x86_64__)
#include <immintrin.h>
extern "C" {
__m256 _ZGVdN8v_expf(__m256);
__m256 _ZGVdN8v_logf(__m256);
__m256 _ZGVdN8v_tanhf(__m256);
__m256 _ZGVdN8v_erff(__m256);
#ifdef __AVX512F__
__m512 _ZGVeN16v_erff(__m512);
__m512 _ZGVeN16v_expf(__m512);
__m512 _ZGVeN16v_logf(__m512);
#endif
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
#undef KILN_VEC_FN

// libmvec's expf sends lanes below -87.33654 (its range check, 0x42AEAC4F)
// through the scalar expf, 13x slower per element (measured on vectors of
// such inputs), and masked attention scores are -FLT_MAX: GPT-2's causal
// softmax spent 2.5x BERT's time per element. Below -104 the float result is 0 (under half the
// least subnormal); between, the scalar expf gives the subnormal results, as
// libmvec's own fallback does: the values are libmvec's, bit for bit.
inline __m256 exp8(__m256 x) {
  const __m256 fast_min = _mm256_set1_ps(-0x1.5d589ep+6f), zero_below = _mm256_set1_ps(-104.0f);
  const __m256 low = _mm256_cmp_ps(x, fast_min, _CMP_LT_OQ);
  if (_mm256_testz_ps(low, low)) return _ZGVdN8v_expf(x);
  const __m256 zero = _mm256_cmp_ps(x, zero_below, _CMP_LT_OQ);
  const __m256 y = _mm256_blendv_ps(_ZGVdN8v_expf(_mm256_blendv_ps(x, fast_min, low)), _mm256_setzero_ps(), zero);
  alignas(32) float xs[8], ys[8];
  _mm256_store_ps(xs, x);
  _mm256_store_ps(ys, y);
  for (int mask = _mm256_movemask_ps(_mm256_andnot_ps(zero, low)); mask; mask &= mask - 1) {
    const int l = __builtin_ctz(static_cast<unsigned>(mask));
    ys[l] = std::exp(xs[l]);
  }
  return _mm256_load_ps(ys);
}
#ifdef __AVX512F__
// e^x on 16 lanes for the softmax rows (exp_shifted_sum, the attention
// rows), 2.4x libmvec's 8-lane expf per value on AVX-512 (0.15 vs 0.37 ns,
// one thread). ≤ 1.02 ulp against the double exp over every 97th float in
// [-110, 90]; NaN stays NaN, below -104 the result is 0 and above 89 ∞.
// n = round(x / ln 2), r = x - n ln 2 in two steps (ln 2's high part has
// 16 significant bits, so n·hi is exact), e^r by Cephes' expf minimax
// polynomial (1 + r + r²·P(r)), then scaled by 2ⁿ with vscalefps, which
// rounds into the subnormals as the scalar expf does.
// (GCC 12 warns, wrongly, that the "undefined" pass-through operand inside
// the AVX-512 intrinsics is or may be used uninitialised.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
inline __m512 exp16(__m512 x) {
  x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // (maxps returns its second operand, x, when x is NaN)
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
// The sum of the 16 lanes (in halves: 8 + 8, 4 + 4, ...).
inline float sum16(__m512 v) { return _mm512_reduce_add_ps(v); }
// exp16 on 8 lanes, in the low half of a zmm (a zmm step costs what a ymm
// one does on this hardware).
inline __m256 exp16_low8(__m256 x) { return _mm512_castps512_ps256(exp16(_mm512_zextps256_ps512(x))); }
#pragma GCC diagnostic pop
#endif
#ifdef __AVX512F__
// erf: libmvec's AVX-512 erff, also for 8 lanes (in a zmm's low half), so
// the 8- and 16-lane paths give the same bits. (Its AVX2 erff is another
// approximation: they differ in the last bits for about half of all floats.
// Both are within libmvec's 4 ulp.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
inline __m512 erf16(__m512 x) { return _ZGVeN16v_erff(x); }
inline __m256 erf8(__m256 x) { return _mm512_castps512_ps256(erf16(_mm512_zextps256_ps512(x))); }
#pragma GCC diagnostic pop
#else
inline __m256 erf8(__m256 x) { return _ZGVdN8v_erff(x); }
#endif
inline __m256 tanh8(__m256 x) { return _ZGVdN8v_tanhf(x); }
inline __m256 log8(__m256 x) { return _ZGVdN8v_logf(x); }

inline void exp(const float* a, float* r, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(r + j, exp8(_mm256_loadu_ps(a + j)));
  for (; j < n; ++j) r[j] = std::exp(a[j]);
}
inline void erf(const float* a, float* r, int64_t n) {
  int64_t j = 0;
#ifdef __AVX512F__
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(r + j, erf16(_mm512_loadu_ps(a + j)));
#endif
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(r + j, erf8(_mm256_loadu_ps(a + j)));
  for (; j < n; ++j) r[j] = std::erf(a[j]);
}
#else
inline void exp(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::exp(a[j]); }
inline void log(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::log(a[j]); }
inline void tanh(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::tanh(a[j]); }
inline void erf(const float* a, float* r, int64_t n) { for (int64_t j = 0; j < n; ++j) r[j] = std::erf(a[j]); }
#endif

// The lane types of the Call ops' float forms (backend/elementwise.h's
// lanes<op, L>): one float (the values of an array left after its last
// whole vector), 8 lanes in a __m256 and 16 in a __m512 (where the build
// has AVX-512). exp, log, tanh and erf give libmvec's bits at both widths,
// lane for lane; fast_exp is GELU's e^x: exp16 in every lane where the
// build has AVX-512, else exp8.
struct Lane1 {
  using V = float;
  static float k(float v) { return v; }
  static float add(float a, float b) { return a + b; }
  static float sub(float a, float b) { return a - b; }
  static float mul(float a, float b) { return a * b; }
  static float div(float a, float b) { return a / b; }
  static float neg(float a) { return -a; }
  static float exp(float x) { return std::exp(x); }
  static float log(float x) { return std::log(x); }
  static float tanh(float x) { return std::tanh(x); }
  static float erf(float x) { return std::erf(x); }
  static float fast_exp(float x) { return std::exp(x); }
};

#ifdef KILN_HAVE_LIBMVEC
template <int W>
struct Lanes;
template <>
struct Lanes<8> {
  using V = __m256;
  static __m256 k(float v) { return _mm256_set1_ps(v); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m256 sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
  static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256 div(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
  static __m256 neg(__m256 a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static __m256 exp(__m256 x) { return exp8(x); }
  static __m256 log(__m256 x) { return log8(x); }
  static __m256 tanh(__m256 x) { return tanh8(x); }
  static __m256 erf(__m256 x) { return erf8(x); }
#ifdef __AVX512F__
  static __m256 fast_exp(__m256 x) { return exp16_low8(x); }
#else
  static __m256 fast_exp(__m256 x) { return exp8(x); }
#endif
};

#ifdef __AVX512F__
// 16 lanes, lane for lane the 8-lane functions' bits. libmvec's AVX-512
// expf and logf give its AVX2 ones' bits on every float (checked over all
// 2^32 inputs with glibc 2.36); its AVX-512 tanhf does not (64.6 million
// inputs differ in the last bit), so tanh16 is tanh8 on each half.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// exp8's range handling (the scalar expf below libmvec's fast range, 0
// below -104) on 16 lanes.
inline __m512 exp16_mvec(__m512 x) {
  const __m512 fast_min = _mm512_set1_ps(-0x1.5d589ep+6f), zero_below = _mm512_set1_ps(-104.0f);
  const __mmask16 low = _mm512_cmp_ps_mask(x, fast_min, _CMP_LT_OQ);
  if (low == 0) return _ZGVeN16v_expf(x);
  const __mmask16 zero = _mm512_cmp_ps_mask(x, zero_below, _CMP_LT_OQ);
  const __m512 y =
      _mm512_mask_blend_ps(zero, _ZGVeN16v_expf(_mm512_mask_blend_ps(low, x, fast_min)), _mm512_setzero_ps());
  alignas(64) float xs[16], ys[16];
  _mm512_store_ps(xs, x);
  _mm512_store_ps(ys, y);
  for (unsigned mask = static_cast<unsigned>(low & ~zero) & 0xFFFFu; mask; mask &= mask - 1) {
    const int l = __builtin_ctz(mask);
    ys[l] = std::exp(xs[l]);
  }
  return _mm512_load_ps(ys);
}
inline __m512 log16(__m512 x) { return _ZGVeN16v_logf(x); }
inline __m512 tanh16(__m512 x) {
  const __m256 lo = tanh8(_mm512_castps512_ps256(x));
  const __m256 hi = tanh8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(lo)), _mm256_castps_pd(hi), 1));
}

template <>
struct Lanes<16> {
  using V = __m512;
  static __m512 k(float v) { return _mm512_set1_ps(v); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 div(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
  static __m512 neg(__m512 a) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
  }
  static __m512 exp(__m512 x) { return exp16_mvec(x); }
  static __m512 log(__m512 x) { return log16(x); }
  static __m512 tanh(__m512 x) { return tanh16(x); }
  static __m512 erf(__m512 x) { return erf16(x); }
  static __m512 fast_exp(__m512 x) { return exp16(x); }
};
#pragma GCC diagnostic pop
#endif
#endif

// The float forms of ir/ops.def's Call ops, from their lane forms
// (backend/elementwise.h's lanes<op, L>): array(a, b, r, n, tanh_form) over
// n values (the interpreter's float groups: fused.cpp; 16 lanes, then 8,
// then one by one, all with the same bits lane for lane), lanes8 / lanes16
// on one __m256 / __m512 (the compiled loops' callees: jit.cpp; where the
// build has libmvec, and AVX-512 for lanes16). b and the second lane
// operand are the second input (GeluGrad's dy), unused by the unary ops;
// tanh_form is GELU's form (ir::GeluAttrs). r may alias a or b.
template <ir::Op op>
struct VecForm {
  static constexpr bool kBinary = ir::op_min_inputs(op) == 2;

  static void array(const float* a, const float* b, float* r, int64_t n, bool tanh_form) {
    int64_t j = 0;
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
    for (; j + 16 <= n; j += 16) {
      const __m512 y = kBinary ? _mm512_loadu_ps(b + j) : _mm512_setzero_ps();
      _mm512_storeu_ps(r + j, lanes16(_mm512_loadu_ps(a + j), y, tanh_form));
    }
#endif
#ifdef KILN_HAVE_LIBMVEC
    for (; j + 8 <= n; j += 8) {
      const __m256 y = kBinary ? _mm256_loadu_ps(b + j) : _mm256_setzero_ps();
      _mm256_storeu_ps(r + j, lanes8(_mm256_loadu_ps(a + j), y, tanh_form));
    }
#endif
    for (; j < n; ++j) r[j] = elementwise::lanes<op, Lane1>(a[j], kBinary ? b[j] : 0.0f, tanh_form);
  }
#ifdef KILN_HAVE_LIBMVEC
  static __m256 lanes8(__m256 a, __m256 b, bool tanh_form) {
    return elementwise::lanes<op, Lanes<8>>(a, b, tanh_form);
  }
#endif
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
  static __m512 lanes16(__m512 a, __m512 b, bool tanh_form) {
    return elementwise::lanes<op, Lanes<16>>(a, b, tanh_form);
  }
#pragma GCC diagnostic pop
#endif
};

}  // namespace kiln::backend::cpu::vec
