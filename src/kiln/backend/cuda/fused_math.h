#pragma once
// The formulas of the fused elementwise ops that need more than an operator
// (GELU and its gradient, casts, the float/double math overloads), shared by
// the device interpreter (fused_eval.h), the kernels generated for each fused
// program (codegen.cpp: NVRTC compiles them with this header) and the host
// tests. Depends on nothing but the C math functions and hd.h, so that NVRTC
// can compile it without a standard library.
#include <math.h>

#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/hd.h"

namespace kiln::backend::cuda {

namespace fused_math {
// float and double overloads of the C math library's functions.
#define KILN_FUSED_MATH(name, f32, f64)                          \
  KILN_HD inline float name(float x) { return ::f32(x); }        \
  KILN_HD inline double name(double x) { return ::f64(x); }
KILN_FUSED_MATH(exp_, expf, exp)
KILN_FUSED_MATH(log_, logf, log)
KILN_FUSED_MATH(tanh_, tanhf, tanh)
KILN_FUSED_MATH(erf_, erff, erf)
KILN_FUSED_MATH(sqrt_, sqrtf, sqrt)
KILN_FUSED_MATH(abs_, fabsf, fabs)
KILN_FUSED_MATH(trunc_, truncf, trunc)
#undef KILN_FUSED_MATH
KILN_HD inline float pow_(float x, float y) { return ::powf(x, y); }
KILN_HD inline double pow_(double x, double y) { return ::pow(x, y); }
template <typename T>
KILN_HD inline bool isnan_(T x) { return x != x; }

constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

// The CPU's float groups (eval_transcendental) and double groups (gelu<T>)
// write the erf form slightly differently: x·(1/√2) against x/√2.
template <typename T>
KILN_HD inline T gelu(T x, bool tanh_form) {
  if (tanh_form) return T(0.5) * x * (T(1) + tanh_(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x)));
  if constexpr (sizeof(T) == 4) return 0.5f * x * (1.0f + erf_(x * 0.70710678118654752440f));
  else return T(0.5) * x * (T(1) + erf_(x / T(kSqrt2)));
}

template <typename T>
KILN_HD inline T gelu_grad(T x, bool tanh_form) {
  if (tanh_form) {
    T t = tanh_(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x));
    if constexpr (sizeof(T) == 4)
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * float(kSqrt2OverPi) * (1.0f + 3.0f * 0.044715f * x * x);
    else
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * T(kSqrt2OverPi) * (T(1) + T(3 * 0.044715) * x * x);
  }
  if constexpr (sizeof(T) == 4)
    return 0.5f * (1.0f + erf_(x * 0.70710678118654752440f)) + x * exp_(-0.5f * x * x) * float(kInvSqrt2Pi);
  else
    return T(0.5) * (T(1) + erf_(x / T(kSqrt2))) + x * exp_(T(-0.5) * x * x) * T(kInvSqrt2Pi);
}

template <typename T>
KILN_HD inline T cast_to(uint8_t dtype, T x) {
  switch (dtype) {
    case kF32: return static_cast<T>(static_cast<float>(x));
    case kI32:
    case kI64: return trunc_(x);
    default: return x != T(0) ? T(1) : T(0);
  }
}
}  // namespace fused_math

}  // namespace kiln::backend::cuda
