#pragma once
// One formula per elementwise op (ir/ops.def's Formula, Inline and Call
// forms), in every form a backend evaluates it:
//  - formula<op, T>, on a value type T (float or double), for every
//    backend: the CPU interpreter evaluates it over its chunks
//    (backend/cpu/fused.cpp), the CUDA interpreter and generated kernels
//    call apply_op / formula (backend/cuda/fused_math.h; NVRTC compiles
//    this header, the op a literal so the switch folds away);
//  - lanes<op, L>, the Call ops' float form on a lane type L (one float, or
//    8 or 16 float lanes: backend/cpu/vecmath.h), which the CPU's float
//    groups take instead: the interpreter's arrays and the compiled loops'
//    callees (backend/cpu/jit.cpp). Host only: nvcc and NVRTC never see it.
// formula depends on nothing but the C math functions, hd.h and the op
// enum, so that NVRTC can compile it without a standard library.
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
    case Op::Silu: return a / (T(1) + exp_(-a));
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
#define KILN_OP(Name, ...)                                                                     \
  case ir::Op::Name:                                                                           \
    if (!has_formula(ir::Op::Name)) return false;                                              \
    r = formula<ir::Op::Name, T>(dtype, form, a, b, c);                                        \
    return true;
#include "kiln/ir/ops.def"
    default: return false;
  }
}

#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
// ---- Lane forms: the Call ops' float forms on the CPU

// A lane type L (backend/cpu/vecmath.h: Lane1, Lanes<8>, Lanes<16>) holds
// L::V (float, __m256, __m512), L::k(c) (c in every lane), add, sub, mul,
// div, neg, and exp, log, tanh, erf (libmvec's values at every width: the
// same bits lane for lane; the C library's on one float) and fast_exp (an
// e^x that GELU uses: the 16-lane polynomial where the build has AVX-512).
// Each form is one fixed order of float operations, so the interpreter's
// arrays (whose last n % 8 values take Lane1) and the compiled loops give
// the same bits; the files that instantiate them are built with
// -ffp-contract=off, so no product and sum is fused into an FMA.
constexpr float kInvSqrt2F = 0.70710678118654752440f;
constexpr float kSqrt2OverPiF = static_cast<float>(0.79788456080286535588);
constexpr float kInvSqrt2PiF = static_cast<float>(0.39894228040143267794);
constexpr float kGeluCubicF = 0.044715f, kGeluCubic3F = 3.0f * 0.044715f;

// σ(2u), u = √(2/π)(x + 0.044715x³): the tanh-form GELU as x·σ(2u) is
// ½x(1 + tanh u) without the cancellation of 1 + tanh u where tanh u nears
// -1 (2.6e-6 relative error at most over [-6, 6], where the float
// ½x(1 + tanh u), PyTorch's, loses every digit below x = -5.5; its
// gradient 9.1e-6 against 3.8e-4), and through the exponential it is
// also faster.
template <typename L, typename V = typename L::V>
inline V gelu_sigmoid_lanes(V x) {
  const V u = L::mul(L::k(kSqrt2OverPiF), L::add(x, L::mul(L::mul(L::mul(L::k(kGeluCubicF), x), x), x)));
  return L::div(L::k(1.0f), L::add(L::k(1.0f), L::fast_exp(L::mul(L::k(-2.0f), u))));
}

// ½x(1 + erf(x/√2)), or x·σ(2u) (the tanh form).
template <typename L, typename V = typename L::V>
inline V gelu_lanes(V x, bool tanh_form) {
  if (tanh_form) return L::mul(x, gelu_sigmoid_lanes<L>(x));
  return L::mul(L::mul(L::k(0.5f), x), L::add(L::k(1.0f), L::erf(L::mul(x, L::k(kInvSqrt2F)))));
}

// dy · gelu'(x): ½(1 + erf(x/√2)) + x·φ(x)  (tanh form: its derivative,
// with s = σ(2u): ½(1 + tanh u) = s and ½(1 - tanh² u) = 2s(1 - s))
template <typename L, typename V = typename L::V>
inline V gelu_grad_lanes(V x, V dy, bool tanh_form) {
  if (tanh_form) {
    const V s = gelu_sigmoid_lanes<L>(x);
    const V slope = L::mul(L::mul(L::mul(L::mul(L::k(2.0f), x), L::mul(s, L::sub(L::k(1.0f), s))), L::k(kSqrt2OverPiF)),
                           L::add(L::k(1.0f), L::mul(L::mul(L::k(kGeluCubic3F), x), x)));
    return L::mul(dy, L::add(s, slope));
  }
  const V t = L::erf(L::mul(x, L::k(kInvSqrt2F))), u = L::fast_exp(L::mul(L::mul(L::k(-0.5f), x), x));
  return L::mul(dy, L::add(L::mul(L::k(0.5f), L::add(L::k(1.0f), t)), L::mul(L::mul(x, u), L::k(kInvSqrt2PiF))));
}

// A Call op (ops.def) on lanes a and b (its inputs; b is unused by the
// unary ops); tanh_form: GELU's (ir::GeluAttrs).
template <ir::Op op, typename L, typename V = typename L::V>
inline V lanes([[maybe_unused]] V a, [[maybe_unused]] V b, [[maybe_unused]] bool tanh_form) {
  using ir::Op;
  static_assert(ir::op_fused_form(op) == ir::FusedForm::Call, "lanes<op>: only ops.def's Call ops have lane forms");
  if constexpr (op == Op::Exp) return L::exp(a);
  else if constexpr (op == Op::Log) return L::log(a);
  else if constexpr (op == Op::Tanh) return L::tanh(a);
  else if constexpr (op == Op::Erf) return L::erf(a);
  else if constexpr (op == Op::Sigmoid) return L::div(L::k(1.0f), L::add(L::k(1.0f), L::exp(L::neg(a))));
  else if constexpr (op == Op::Gelu) return gelu_lanes<L>(a, tanh_form);
  else if constexpr (op == Op::Silu) return L::div(a, L::add(L::k(1.0f), L::exp(L::neg(a))));
  else if constexpr (op == Op::GeluGrad) return gelu_grad_lanes<L>(a, b, tanh_form);
  else static_assert(op == Op::Exp, "a Call op without a lane form: add it to lanes<op> above");
}
#endif  // !__CUDACC__ && !__CUDACC_RTC__

}  // namespace kiln::backend::elementwise
