#pragma once
// One formula per elementwise op (ir/ops.def's Formula, Inline and Call
// forms), on a value type T (float or double), for every backend: the CPU
// interpreter evaluates formula<op> over its chunks (backend/cpu/fused.cpp),
// the CUDA interpreter and generated kernels call apply_op / formula
// (backend/cuda/fused_math.h; NVRTC compiles this header, the op a literal
// so the switch folds away). Float groups on the CPU take the Call ops'
// lane forms instead (backend/cpu/vecmath.h). Depends on nothing but the C
// math functions, hd.h and the op enum, so that NVRTC can compile it
// without a standard library.
#include <math.h>
#include <cstdint>

#include "kiln/core/bf16.h"
#include "kiln/core/hd.h"
#include "kiln/ir/op.h"

namespace kiln::backend::elementwise {

// DType codes (kiln::DType's values: core/dtype.h), for code that NVRTC compiles.
enum : uint8_t { kF32 = 0, kI32 = 1, kI64 = 2, kB8 = 3, kBF16 = 4 };

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

// The float form multiplies by 1/√2 where the double form divides by √2, as
// the CPU's float lane forms (vecmath.h) and its double groups do.
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
    case kBF16: return static_cast<T>(round_to_bf16(static_cast<float>(x)));
    case kI32:
    case kI64: return trunc_(x);
    default: return x != T(0) ? T(1) : T(0);
  }
}

// op on a, b, c (its inputs in order; the unused ones are ignored).
// dtype: the step's DType code (Cast's target, Div's integer rule); form:
// Gelu's and GeluGrad's (1: the tanh form, ir::GeluAttrs).
template <ir::Op op, typename T>
KILN_HD inline T formula(uint8_t dtype, int32_t form, T a, T b, T c) {
  using ir::Op;
  switch (op) {
    case Op::Neg: return -a;
    case Op::Exp: return exp_(a);
    case Op::Log: return log_(a);
    case Op::Tanh: return tanh_(a);
    case Op::Erf: return erf_(a);
    case Op::Sqrt: return sqrt_(a);
    case Op::Rsqrt: return T(1) / sqrt_(a);
    case Op::Abs: return abs_(a);
    case Op::Sigmoid: return T(1) / (T(1) + exp_(-a));
    case Op::Relu: return a > T(0) ? a : T(0);
    case Op::Gelu: return gelu(a, form == 1);
    case Op::GeluGrad: return b * gelu_grad(a, form == 1);
    case Op::Not: return a == T(0) ? T(1) : T(0);
    case Op::Cast: return cast_to(dtype, a);
    case Op::Detach: return a;
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return dtype == kF32 || dtype == kBF16 ? a / b : trunc_(a / b);
    case Op::Pow: return pow_(a, b);
    case Op::Max: return a > b || isnan_(a) ? a : b;
    case Op::Min: return a < b || isnan_(a) ? a : b;
    case Op::Eq: return a == b ? T(1) : T(0);
    case Op::Ne: return a != b ? T(1) : T(0);
    case Op::Lt: return a < b ? T(1) : T(0);
    case Op::Le: return a <= b ? T(1) : T(0);
    case Op::Gt: return a > b ? T(1) : T(0);
    case Op::Ge: return a >= b ? T(1) : T(0);
    case Op::And: return a != T(0) && b != T(0) ? T(1) : T(0);
    case Op::Or: return a != T(0) || b != T(0) ? T(1) : T(0);
    case Op::Where: return a != T(0) ? b : c;
    default: return T(0);  // not an op with a formula (has_formula)
  }
}

// Whether op has a formula above (ops.def's Fused column).
KILN_HD constexpr bool has_formula(ir::Op op) {
  const ir::FusedForm f = ir::op_fused_form(op);
  return f == ir::FusedForm::Formula || f == ir::FusedForm::Inline || f == ir::FusedForm::Call;
}

// formula<op> for an op known at run time into r; false for an op without
// a formula (a load, a constant, a random draw, or not elementwise).
template <typename T>
KILN_HD inline bool apply_op(ir::Op op, uint8_t dtype, int32_t form, T a, T b, T c, T& r) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, Fused)                          \
  case ir::Op::Name:                                                                           \
    if (!has_formula(ir::Op::Name)) return false;                                              \
    r = formula<ir::Op::Name, T>(dtype, form, a, b, c);                                        \
    return true;
#include "kiln/ir/ops.def"
    default: return false;
  }
}

}  // namespace kiln::backend::elementwise
