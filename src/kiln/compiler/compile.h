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
  // Adjacent matrix products that do not depend on each other (a linear
  // layer's input and weight gradients, the attention's q, k and v
  // projections) are paired with Instr::with_next, so an executor may run
  // them side by side, a thread each (CPU: on two threads one product per
  // thread beats two products on both threads one after the other).
  bool concurrent_products = false;
};

Program compile(const ir::Graph& graph, const CompileOptions& options = {});

// Passes, exposed for tests.
ir::Graph simplify(const ir::Graph& graph);  // CSE, identity removal, DCE

}  // namespace kiln::compiler
