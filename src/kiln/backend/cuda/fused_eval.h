#pragma once
// One element of a fused elementwise program: the CUDA kernel's body (one
// thread per element), written once for the device and the host tests. It
// follows the CPU interpreter (backend/cpu/fused.cpp) op by op: the same
// formulas, double evaluation for groups with integer values, and f32
// registers rounded to f32 in double groups.
#include <math.h>

#include <cstdint>

#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/philox_core.h"
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
    case kI32:
    case kI64: return trunc_(x);
    default: return x != T(0) ? T(1) : T(0);
  }
}
}  // namespace fused_math

// Evaluates the program for element i into regs (physical registers).
// Returns false on an op the interpreter does not know (the executor rejects
// such programs before launching, so the kernel never sees one).
template <typename T>
KILN_HD inline bool fused_eval(const FStep* steps, int nsteps, const ViewDesc* inputs, const char* const* slots,
                               int64_t i, T* regs) {
  using namespace fused_math;
  using ir::Op;
  for (int k = 0; k < nsteps; ++k) {
    const FStep& s = steps[k];
    const T a = regs[s.a], b = regs[s.b], c = regs[s.c];
    T r;
    switch (static_cast<Op>(s.op)) {
      case Op::Data: {
        const ViewDesc& v = inputs[s.load];
        r = load_as<T>(slots[v.slot], v.dtype, view_offset(v, i));
        break;
      }
      case Op::Constant: r = static_cast<T>(s.value); break;
      case Op::RandUniform:
      case Op::RandNormal: {
        const ViewDesc& v = inputs[s.load];
        const int64_t* key = reinterpret_cast<const int64_t*>(slots[v.slot]) + v.offset;
        const uint64_t seed = static_cast<uint64_t>(key[0]), offset = static_cast<uint64_t>(key[1]);
        const uint64_t index = static_cast<uint64_t>(i + (v.numel > 2 ? key[2] : 0));
        r = static_cast<T>(static_cast<Op>(s.op) == Op::RandUniform ? philox_uniform(seed, offset, index)
                                                                    : philox_normal(seed, offset, index));
        break;
      }
      case Op::Neg: r = -a; break;
      case Op::Exp: r = exp_(a); break;
      case Op::Log: r = log_(a); break;
      case Op::Tanh: r = tanh_(a); break;
      case Op::Erf: r = erf_(a); break;
      case Op::Sqrt: r = sqrt_(a); break;
      case Op::Rsqrt: r = T(1) / sqrt_(a); break;
      case Op::Abs: r = abs_(a); break;
      case Op::Sigmoid: r = T(1) / (T(1) + exp_(-a)); break;
      case Op::Relu: r = a > T(0) ? a : T(0); break;
      case Op::Gelu: r = gelu(a, s.iattr == 1); break;
      case Op::GeluGrad: r = b * gelu_grad(a, s.iattr == 1); break;
      case Op::Not: r = a == T(0) ? T(1) : T(0); break;
      case Op::Cast: r = cast_to(s.dtype, a); break;
      case Op::Detach: r = a; break;
      case Op::Add: r = a + b; break;
      case Op::Sub: r = a - b; break;
      case Op::Mul: r = a * b; break;
      case Op::Div: r = s.dtype == kF32 ? a / b : trunc_(a / b); break;
      case Op::Pow: r = pow_(a, b); break;
      case Op::Max: r = a > b || isnan_(a) ? a : b; break;
      case Op::Min: r = a < b || isnan_(a) ? a : b; break;
      case Op::Eq: r = a == b ? T(1) : T(0); break;
      case Op::Ne: r = a != b ? T(1) : T(0); break;
      case Op::Lt: r = a < b ? T(1) : T(0); break;
      case Op::Le: r = a <= b ? T(1) : T(0); break;
      case Op::Gt: r = a > b ? T(1) : T(0); break;
      case Op::Ge: r = a >= b ? T(1) : T(0); break;
      case Op::And: r = a != T(0) && b != T(0) ? T(1) : T(0); break;
      case Op::Or: r = a != T(0) || b != T(0) ? T(1) : T(0); break;
      case Op::Where: r = a != T(0) ? b : c; break;
      default: return false;
    }
    // Values of f32 registers are rounded to f32 even when evaluated in double.
    if (sizeof(T) == 8 && s.dtype == kF32 && static_cast<Op>(s.op) != Op::Data)
      r = static_cast<T>(static_cast<float>(r));
    regs[s.dst] = r;
  }
  return true;
}

// True when the interpreter evaluates op (the executor checks every step).
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

// Element i of every output of the fused instruction `d`.
template <typename T>
KILN_HD inline void fused_store(const FusedDesc* d, char* const* slots, int64_t i, const T* regs) {
  const ViewDesc* outs = desc_array<ViewDesc>(d, d->outs_at);
  const int32_t* out_regs = desc_array<int32_t>(d, d->out_regs_at);
  for (int j = 0; j < d->nouts; ++j) {
    const ViewDesc& v = outs[j];
    store_as<T>(slots[v.slot], v.dtype, view_offset(v, i), regs[out_regs[j]]);
  }
}

}  // namespace kiln::backend::cuda
