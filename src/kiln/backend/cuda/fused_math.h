#pragma once
// What the fused CUDA programs add to the elementwise formulas
// (backend/elementwise.h): a step's value rounded as its register holds it,
// and apply_op as an expression for the generated kernels. Shared by the
// device interpreter (fused_eval.h), the kernels generated for each fused
// program (codegen.cpp: NVRTC compiles them with this header) and the host
// tests; NVRTC compiles it without a standard library.
#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/elementwise.h"
#include "kiln/core/hd.h"
#include "kiln/ir/op.h"

namespace kiln::backend::cuda {

namespace fused_math {
using namespace kiln::backend::elementwise;

// A step's value as its register holds it: f32 values are rounded to f32
// even in groups evaluated in double, bf16 values to bf16 (as the CPU
// interpreter does).
template <typename T>
KILN_HD inline T as_step_value(T r, uint8_t dtype) {
  if (dtype == kBF16) return static_cast<T>(round_to_bf16(static_cast<float>(r)));
  return sizeof(T) == 8 && dtype == kF32 ? static_cast<T>(static_cast<float>(r)) : r;
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
// draws and apply_op's ops (ir/ops.def's Fused column; the executor checks
// every step).
KILN_HD inline bool fused_supports(uint8_t op) { return ir::fuses(static_cast<ir::Op>(op)); }

}  // namespace kiln::backend::cuda
