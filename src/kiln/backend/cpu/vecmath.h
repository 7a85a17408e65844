#pragma once
// Vectorised float math for the fused interpreter and the compiled loops:
// glibc's libmvec (AVX2 variants, ≤ 4 ulp) where the build targets AVX2, the
// scalar libm otherwise. r and a may alias.
#include <cmath>
#include <cstdint>

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

// The composites of the fused programs (sigmoid, GELU and its gradient in
// both forms), 8 lanes at a time through the functions above (GELU and erf
// 16 where the build has AVX-512) and one by one for the last n % 8
// values, each in one fixed order of float operations: the interpreter
// (fused.cpp) and the compiled loops (jit.cpp, which call the 8-lane forms)
// give the same bits. Both files are built with
// -ffp-contract=off, so no product and sum is fused into an FMA.
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kSqrt2OverPi = static_cast<float>(0.79788456080286535588);
constexpr float kInvSqrt2Pi = static_cast<float>(0.39894228040143267794);
constexpr float kGeluCubic = 0.044715f, kGeluCubic3 = 3.0f * 0.044715f;

// 1 / (1 + e^-x)
inline float sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// ½x(1 + erf(x/√2))  (tanh form: ½x(1 + tanh u), u = √(2/π)(x + 0.044715x³),
// computed as x·σ(2u) = x / (1 + e^-2u): the same function, without the
// cancellation of 1 + tanh u where tanh u nears -1. Measured over [-6, 6]
// against the double form: 2.6e-6 relative error at most, where the float
// ½x(1 + tanh u) (PyTorch's) reaches 100 % (0 for x < -5.5); its gradient
// 9.1e-6 against 3.8e-4. Through the exponential it is also 1.5-2x as fast.)
inline float tanh_arg1(float x) { return kSqrt2OverPi * (x + kGeluCubic * x * x * x); }
inline float gelu_sigmoid1(float x) { return 1.0f / (1.0f + std::exp(-2.0f * tanh_arg1(x))); }
inline float gelu1(float x, bool tanh_form) {
  if (tanh_form) return x * gelu_sigmoid1(x);
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}
// dy · gelu'(x): ½(1 + erf(x/√2)) + x·φ(x)  (tanh form: its derivative,
// with s = σ(2u): ½(1 + tanh u) = s and ½(1 - tanh² u) = 2s(1 - s))
inline float gelu_grad1(float x, float dy, bool tanh_form) {
  if (tanh_form) {
    const float s = gelu_sigmoid1(x);
    return dy * (s + 2.0f * x * (s * (1.0f - s)) * kSqrt2OverPi * (1.0f + kGeluCubic3 * x * x));
  }
  const float t = std::erf(x * kInvSqrt2), u = std::exp(-0.5f * x * x);
  return dy * (0.5f * (1.0f + t) + x * u * kInvSqrt2Pi);
}

#ifdef KILN_HAVE_LIBMVEC
// The GELU composites at either width W: 8 lanes in a __m256 (the compiled
// loops call these) or 16 in a __m512 (where the build has AVX-512): one
// sequence of operations through Lanes<W>, so both widths give the same
// bits lane for lane. Lanes<W>::gelu_exp is the e^x of both forms (the
// tanh form's sigmoid, the erf form's gradient's e^(-x²/2)): exp16 in every
// lane where the build has AVX-512, else exp8; erf is erf8 / erf16 (one
// libmvec erff).
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
#ifdef __AVX512F__
  static __m256 gelu_exp(__m256 x) { return exp16_low8(x); }
#else
  static __m256 gelu_exp(__m256 x) { return exp8(x); }
#endif
  static __m256 erf(__m256 x) { return erf8(x); }
};
#ifdef __AVX512F__
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
template <>
struct Lanes<16> {
  using V = __m512;
  static __m512 k(float v) { return _mm512_set1_ps(v); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 div(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
  static __m512 gelu_exp(__m512 x) { return exp16(x); }
  static __m512 erf(__m512 x) { return erf16(x); }
};
#pragma GCC diagnostic pop
#endif

inline __m256 sigmoid8(__m256 x) {
  using L = Lanes<8>;
  return L::div(L::k(1.0f), L::add(L::k(1.0f), exp8(_mm256_xor_ps(x, L::k(-0.0f)))));
}

// σ(2u), u = √(2/π)(x + 0.044715x³)
template <int W, typename V = typename Lanes<W>::V>
V gelu_sigmoid(V x) {
  using L = Lanes<W>;
  const V u = L::mul(L::k(kSqrt2OverPi), L::add(x, L::mul(L::mul(L::mul(L::k(kGeluCubic), x), x), x)));
  return L::div(L::k(1.0f), L::add(L::k(1.0f), L::gelu_exp(L::mul(L::k(-2.0f), u))));
}
template <int W, typename V = typename Lanes<W>::V>
V gelu(V x, bool tanh_form) {
  using L = Lanes<W>;
  if (tanh_form) return L::mul(x, gelu_sigmoid<W>(x));
  return L::mul(L::mul(L::k(0.5f), x), L::add(L::k(1.0f), L::erf(L::mul(x, L::k(kInvSqrt2)))));
}
template <int W, typename V = typename Lanes<W>::V>
V gelu_grad(V x, V dy, bool tanh_form) {
  using L = Lanes<W>;
  if (tanh_form) {
    const V s = gelu_sigmoid<W>(x);
    const V slope = L::mul(L::mul(L::mul(L::mul(L::k(2.0f), x), L::mul(s, L::sub(L::k(1.0f), s))), L::k(kSqrt2OverPi)),
                           L::add(L::k(1.0f), L::mul(L::mul(L::k(kGeluCubic3), x), x)));
    return L::mul(dy, L::add(s, slope));
  }
  const V t = L::erf(L::mul(x, L::k(kInvSqrt2))), u = L::gelu_exp(L::mul(L::mul(L::k(-0.5f), x), x));
  return L::mul(dy, L::add(L::mul(L::k(0.5f), L::add(L::k(1.0f), t)), L::mul(L::mul(x, u), L::k(kInvSqrt2Pi))));
}
inline __m256 gelu8(__m256 x, bool tanh_form) { return gelu<8>(x, tanh_form); }
inline __m256 gelu_grad8(__m256 x, __m256 dy, bool tanh_form) { return gelu_grad<8>(x, dy, tanh_form); }

#ifdef __AVX512F__
// The 8-lane functions above on 16 lanes, lane for lane the same bits, for
// the compiled loops that take 16 values an iteration (jit.cpp). libmvec's
// AVX-512 expf and logf give its AVX2 ones' bits on every float (checked
// over all 2^32 inputs with glibc 2.36); its AVX-512 tanhf does not (64.6
// million inputs differ in the last bit), so tanh16 is tanh8 on each half.
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
inline __m512 sigmoid16(__m512 x) {
  using L = Lanes<16>;
  return L::div(L::k(1.0f), L::add(L::k(1.0f), exp16_mvec(_mm512_castsi512_ps(
      _mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(static_cast<int>(0x80000000u)))))));
}
inline __m512 gelu16(__m512 x, bool tanh_form) { return gelu<16>(x, tanh_form); }
inline __m512 gelu_grad16(__m512 x, __m512 dy, bool tanh_form) { return gelu_grad<16>(x, dy, tanh_form); }
#pragma GCC diagnostic pop
#endif
#endif

// r = f(a) (gelu_grad: f(a, b)) over n values; r may alias a or b.
inline void sigmoid(const float* a, float* r, int64_t n) {
  int64_t j = 0;
#ifdef KILN_HAVE_LIBMVEC
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(r + j, sigmoid8(_mm256_loadu_ps(a + j)));
#endif
  for (; j < n; ++j) r[j] = sigmoid1(a[j]);
}
inline void gelu(const float* a, float* r, int64_t n, bool tanh_form) {
  int64_t j = 0;
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(r + j, gelu<16>(_mm512_loadu_ps(a + j), tanh_form));
#endif
#ifdef KILN_HAVE_LIBMVEC
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(r + j, gelu8(_mm256_loadu_ps(a + j), tanh_form));
#endif
  for (; j < n; ++j) r[j] = gelu1(a[j], tanh_form);
}
inline void gelu_grad(const float* a, const float* b, float* r, int64_t n, bool tanh_form) {
  int64_t j = 0;
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(r + j, gelu_grad<16>(_mm512_loadu_ps(a + j), _mm512_loadu_ps(b + j), tanh_form));
#endif
#ifdef KILN_HAVE_LIBMVEC
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(r + j, gelu_grad8(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), tanh_form));
#endif
  for (; j < n; ++j) r[j] = gelu_grad1(a[j], b[j], tanh_form);
}

// The float lane forms of ir/ops.def's Call ops, one specialisation per op:
// array(a, b, r, n, tanh_form) over n values (the interpreter's float
// groups: fused.cpp), lanes8 / lanes16 on one __m256 / __m512 (the compiled
// loops' callees: jit.cpp; where the build has libmvec, and AVX-512 for
// lanes16). b and the second lane operand are GeluGrad's dy, unused by the
// unary ops; tanh_form is GELU's form (ir::GeluAttrs).
template <ir::Op op>
struct VecForm;

#ifdef KILN_HAVE_LIBMVEC
#define KILN_VEC_LANES8(f8) \
  static __m256 lanes8(__m256 x, __m256, bool) { return f8(x); }
#else
#define KILN_VEC_LANES8(f8)
#endif
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
#define KILN_VEC_LANES16(f16) \
  static __m512 lanes16(__m512 x, __m512, bool) { return f16(x); }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#else
#define KILN_VEC_LANES16(f16)
#endif
#define KILN_VEC_UNARY(Op_, f, f8, f16)                                                        \
  template <>                                                                                  \
  struct VecForm<ir::Op::Op_> {                                                                \
    static void array(const float* a, const float*, float* r, int64_t n, bool) { f(a, r, n); } \
    KILN_VEC_LANES8(f8)                                                                        \
    KILN_VEC_LANES16(f16)                                                                      \
  };
KILN_VEC_UNARY(Exp, exp, exp8, exp16_mvec)
KILN_VEC_UNARY(Log, log, log8, log16)
KILN_VEC_UNARY(Tanh, tanh, tanh8, tanh16)
KILN_VEC_UNARY(Erf, erf, erf8, erf16)
KILN_VEC_UNARY(Sigmoid, sigmoid, sigmoid8, sigmoid16)
#undef KILN_VEC_UNARY
#undef KILN_VEC_LANES8
#undef KILN_VEC_LANES16

template <>
struct VecForm<ir::Op::Gelu> {
  static void array(const float* a, const float*, float* r, int64_t n, bool t) { gelu(a, r, n, t); }
#ifdef KILN_HAVE_LIBMVEC
  static __m256 lanes8(__m256 x, __m256, bool t) { return gelu8(x, t); }
#ifdef __AVX512F__
  static __m512 lanes16(__m512 x, __m512, bool t) { return gelu16(x, t); }
#endif
#endif
};
// dy · gelu'(x)
template <>
struct VecForm<ir::Op::GeluGrad> {
  static void array(const float* a, const float* b, float* r, int64_t n, bool t) { gelu_grad(a, b, r, n, t); }
#ifdef KILN_HAVE_LIBMVEC
  static __m256 lanes8(__m256 x, __m256 dy, bool t) { return gelu_grad8(x, dy, t); }
#ifdef __AVX512F__
  static __m512 lanes16(__m512 x, __m512 dy, bool t) { return gelu_grad16(x, dy, t); }
#endif
#endif
};
#if defined(KILN_HAVE_LIBMVEC) && defined(__AVX512F__)
#pragma GCC diagnostic pop
#endif

}  // namespace kiln::backend::cpu::vec
