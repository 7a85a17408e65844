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
};

Program compile(const ir::Graph& graph, const CompileOptions& options = {});

// Passes, exposed for tests.
ir::Graph simplify(const ir::Graph& graph);  // CSE, identity removal, DCE

}  // namespace kiln::compiler
