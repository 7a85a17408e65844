#pragma once
// The geometry and attributes of an Attention / AttentionGrad instruction
// (ir/op.h), as both backends' kernels read them: the CPU's reference
// kernel (cpu/attention.cpp) and the CUDA kernels (cuda/attention.cu).
#include <cstdint>

#include "kiln/compiler/program.h"

namespace kiln::backend {

struct AttentionArgs {
  int64_t B = 0, H = 0, Tq = 0, Tk = 0;
  int D = 0;
  bool causal = false;
  float scale = 1.0f, dropout = 0.0f;
  float inv_keep = 1.0f;          // 1 / (1 - dropout), rounded from double as dropout() does
  int64_t mask_batch_stride = 0;  // Tk when the mask has one row per batch entry, else 0
  int64_t window = 0;             // a causal sliding window's keys per query (0: none)
  int mask_input = -1, key_input = -1;  // the inputs holding the mask and the rng key (-1: none)
  int segment_input = -1;               // the input holding the segment ids (-1: none)
};

inline AttentionArgs attention_args(const compiler::Instr& ins) {
  const Shape& qs = ins.inputs[0].view.shape;
  AttentionArgs a;
  a.B = qs[0], a.H = qs[1], a.Tq = qs[2], a.Tk = ins.inputs[1].view.shape[2];
  a.D = static_cast<int>(qs[3]);
  const auto at = ir::AttentionAttrs::of(ins.attrs);
  a.causal = at.causal;
  a.scale = static_cast<float>(at.scale);
  a.dropout = static_cast<float>(at.dropout_p);
  if (at.dropout_p > 0.0) a.inv_keep = static_cast<float>(1.0 / (1.0 - at.dropout_p));
  a.window = at.window;
  int next = 3;
  if (at.has_mask) {
    a.mask_input = next++;
    if (ins.inputs[a.mask_input].view.shape[0] == a.B && a.B > 1) a.mask_batch_stride = a.Tk;
  }
  if (at.has_dropout) a.key_input = next++;
  if (at.has_segments) a.segment_input = next;
  return a;
}

}  // namespace kiln::backend
