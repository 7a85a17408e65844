#pragma once
// One element of a fused elementwise program: the CUDA kernel's body (one
// thread per element), written once for the device and the host tests. It
// follows the CPU interpreter (backend/cpu/fused.cpp) op by op: the same
// formulas, double evaluation for groups with integer values, and f32
// registers rounded to f32 in double groups.
#include <cstdint>

#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/cuda/fused_math.h"
#include "kiln/backend/philox_core.h"
#include "kiln/ir/op.h"

namespace kiln::backend::cuda {

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
