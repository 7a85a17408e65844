#pragma once
// The fused elementwise ops' formulas, op by op (apply_op), shared by the
// device interpreter (fused_eval.h), the kernels generated for each fused
// program (codegen.cpp: NVRTC compiles them with this header, the op a
// literal so the switch folds away) and the host tests. Depends on nothing
// but the C math functions, hd.h and the op enum, so that NVRTC can compile
// it without a standard library.
#include <math.h>

#include "kiln/backend/cuda/desc.h"
#include "kiln/core/hd.h"
#include "kiln/ir/op.h"

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
    case kBF16: return static_cast<T>(round_to_bf16(static_cast<float>(x)));
    case kI32:
    case kI64: return trunc_(x);
    default: return x != T(0) ? T(1) : T(0);
  }
}

// A step's value as its register holds it: f32 values are rounded to f32
// even in groups evaluated in double, bf16 values to bf16 (as the CPU
// interpreter does).
template <typename T>
KILN_HD inline T as_step_value(T r, uint8_t dtype) {
  if (dtype == kBF16) return static_cast<T>(round_to_bf16(static_cast<float>(r)));
  return sizeof(T) == 8 && dtype == kF32 ? static_cast<T>(static_cast<float>(r)) : r;
}

// One elementwise op (not a load, constant or random draw) on a, b, c into
// r; false for an op that is not one of them. dtype: the step's DType code
// (Cast's target, Div's integer rule); iattr: Gelu's form (1: tanh).
template <typename T>
KILN_HD inline bool apply_op(ir::Op op, uint8_t dtype, int32_t iattr, T a, T b, T c, T& r) {
  using ir::Op;
  switch (op) {
    case Op::Neg: r = -a; return true;
    case Op::Exp: r = exp_(a); return true;
    case Op::Log: r = log_(a); return true;
    case Op::Tanh: r = tanh_(a); return true;
    case Op::Erf: r = erf_(a); return true;
    case Op::Sqrt: r = sqrt_(a); return true;
    case Op::Rsqrt: r = T(1) / sqrt_(a); return true;
    case Op::Abs: r = abs_(a); return true;
    case Op::Sigmoid: r = T(1) / (T(1) + exp_(-a)); return true;
    case Op::Relu: r = a > T(0) ? a : T(0); return true;
    case Op::Gelu: r = gelu(a, iattr == 1); return true;
    case Op::GeluGrad: r = b * gelu_grad(a, iattr == 1); return true;
    case Op::Not: r = a == T(0) ? T(1) : T(0); return true;
    case Op::Cast: r = cast_to(dtype, a); return true;
    case Op::Detach: r = a; return true;
    case Op::Add: r = a + b; return true;
    case Op::Sub: r = a - b; return true;
    case Op::Mul: r = a * b; return true;
    case Op::Div: r = dtype == kF32 || dtype == kBF16 ? a / b : trunc_(a / b); return true;
    case Op::Pow: r = pow_(a, b); return true;
    case Op::Max: r = a > b || isnan_(a) ? a : b; return true;
    case Op::Min: r = a < b || isnan_(a) ? a : b; return true;
    case Op::Eq: r = a == b ? T(1) : T(0); return true;
    case Op::Ne: r = a != b ? T(1) : T(0); return true;
    case Op::Lt: r = a < b ? T(1) : T(0); return true;
    case Op::Le: r = a <= b ? T(1) : T(0); return true;
    case Op::Gt: r = a > b ? T(1) : T(0); return true;
    case Op::Ge: r = a >= b ? T(1) : T(0); return true;
    case Op::And: r = a != T(0) && b != T(0) ? T(1) : T(0); return true;
    case Op::Or: r = a != T(0) || b != T(0) ? T(1) : T(0); return true;
    case Op::Where: r = a != T(0) ? b : c; return true;
    default: return false;
  }
}

// apply_op as an expression (the generated kernels).
template <typename T>
KILN_HD inline T op_value(ir::Op op, uint8_t dtype, int32_t iattr, T a, T b, T c) {
  T r = T(0);
  apply_op(op, dtype, iattr, a, b, c, r);
  return r;
}
}  // namespace fused_math

// True when a fused program's step may use op: loads, constants, random
// draws and apply_op's ops (the executor checks every step).
KILN_HD inline bool fused_supports(uint8_t op) {
  using ir::Op;
  switch (static_cast<Op>(op)) {
    case Op::Data: case Op::Constant: case Op::RandUniform: case Op::RandNormal: case Op::Neg: case Op::Exp:
    case Op::Log: case Op::Tanh: case Op::Erf: case Op::Sqrt: case Op::Rsqrt: case Op::Abs: case Op::Sigmoid:
    case Op::Relu: case Op::Gelu: case Op::GeluGrad: case Op::Not: case Op::Cast: case Op::Detach: case Op::Add:
    case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Max: case Op::Min: case Op::Eq: case Op::Ne:
    case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge: case Op::And: case Op::Or: case Op::Where:
      return true;
    default:
      return false;
  }
}

}  // namespace kiln::backend::cuda
