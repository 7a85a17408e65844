#pragma once
// Graph → Program: simplification and CSE, dead-code elimination, elementwise
// fusion, view folding of movement ops, liveness-based memory planning into
// one arena, and donation of parameter buffers to outputs.
#include "kiln/compiler/program.h"
#include "kiln/ir/graph.h"

namespace kiln::compiler {

Program compile(const ir::Graph& graph);

// Passes, exposed for tests.
ir::Graph simplify(const ir::Graph& graph);  // CSE, identity removal, DCE

}  // namespace kiln::compiler
