#pragma once
// Graph → Program: simplification and CSE, dead-code elimination, elementwise
// fusion, view folding of movement ops, liveness-based memory planning into
// one arena, and donation of parameter buffers to outputs.
#include "kiln/compiler/program.h"
#include "kiln/ir/graph.h"

namespace kiln::compiler {

struct CompileOptions {
  // An elementwise group read only by a Sum over trailing axes runs inside
  // the Sum (CPU: the gradient norm's squares are never stored). Backends
  // that do not run such Sums (CUDA today) leave it off.
  bool fuse_sum_inputs = false;
  // Attention's q, k, v and output gradient are read as strided views when a
  // head's rows are D floats apart or more (CPU: the heads of a [B, T, H·D]
  // projection are not copied out). Backends whose attention kernels read
  // contiguous heads (CUDA today) leave it off.
  bool strided_attention_operands = false;
  // A Sum over leading axes reads its operand as a strided view when the
  // view's rows are contiguous and evenly spaced (summed_row_stride; CPU:
  // BERT's q, k and v bias gradients are summed where they lie in the
  // interleaved attention gradient, not copied out first). Backends whose
  // reductions read contiguous operands (CUDA today) leave it off.
  bool strided_row_sums = false;
  // Adjacent matrix products that do not depend on each other (a linear
  // layer's input and weight gradients, the attention's q, k and v
  // projections) are paired with Instr::with_next, so an executor may run
  // them side by side, a thread each (CPU: on two threads one product per
  // thread beats two products on both threads one after the other).
  bool concurrent_products = false;
  // A temporary result takes the memory of a temporary operand that is read
  // for the last time by the instruction writing it, when the instruction
  // reads that operand in the result's element order before writing it: a
  // fused group (every chunk is loaded before it is stored), LayerNorm and
  // its gradient, the cross-entropy gradient over its logits (row kernels
  // that read a row before writing it), an IndexAdd over its base. The
  // arena shrinks, and the result lands where its operand was just read, in
  // cache. Backends whose kernels have not been checked for it (CUDA today)
  // leave it off.
  bool in_place = false;
  // A step that takes the cross-entropy and its gradient over the same
  // logits computes both in the gradient's instruction (the loss is its
  // extra output, ExtraOutput::reg -1), when nothing reads the loss in
  // between: one pass over the logits instead of two (CPU; the CUDA
  // executor runs the two kernels apart).
  bool loss_with_gradient = false;
  // Attention writes its result token-major ([B, T, H, D] in memory) when
  // the result is permuted to [B, T, H, D] (the heads merged back into
  // [B, T, H·D]), and a self-attention gradient (q, k, v of one shape, read
  // only through its three slices, each only reshaped) is laid out as
  // [3, B, H, T, D] over [B, T, 3, H, D] memory; a Concat of views that
  // lie side by side in one buffer, in order, is a view of it. GPT-2: no
  // copy of the heads out of the result (one a layer), none of dq, dk and
  // dv, and no concatenation into its [B, T, 3·H·D] projection's gradient
  // (CPU; the CUDA kernels write contiguous heads).
  bool token_major_attention = false;
  // An Attention (f32 or bf16 operands; no sliding window) whose gradient comes later keeps its softmax
  // probabilities for it, as an extra output (ExtraOutput::reg -1) of
  // B·H·Tq·(Tk + 1) floats that the gradient's instruction reads in place of
  // the forward's result (its input size - 2), when a head's Tq·Tk is at most
  // kKeptProbabilities: the gradient does not recompute the scores, the
  // softmax and the dropout's draw. Both instructions' attrs.ints gain a
  // fourth value, 1. Longer sequences recompute (the store grows with Tq·Tk).
  // CPU; the CUDA kernels recompute.
  bool attention_probabilities = false;
  static constexpr int64_t kKeptProbabilities = 256 * 256;
  // A matrix product whose f32 result is read only as autocast's bf16
  // rounding of it (through views) writes the bf16 values itself
  // (bf16_results.cpp; CPU: oneDNN rounds as it stores), and a fused group
  // stores the bf16 rounding of its f32 result as a second output
  // (compile.cpp's riding roundings). The CUDA kernels write f32 results.
  bool bf16_results = false;

  // A digest of every option and constant above: the on-disk compile cache
  // keeps a graph's program per options.
  uint64_t hash() const;
};

Program compile(const ir::Graph& graph, const CompileOptions& options = {});

// Passes, exposed for tests.
ir::Graph simplify(const ir::Graph& graph);  // CSE, identity removal, DCE, small results placed early

}  // namespace kiln::compiler
