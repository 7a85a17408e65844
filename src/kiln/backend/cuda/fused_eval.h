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
      default:
        if (!apply_op(static_cast<Op>(s.op), s.dtype, s.iattr, a, b, c, r)) return false;
    }
    if (static_cast<Op>(s.op) != Op::Data) r = as_step_value(r, s.dtype);
    regs[s.dst] = r;
  }
  return true;
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
