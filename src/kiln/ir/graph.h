#pragma once
// A flattened, self-contained copy of the pending computation: what the
// compile cache hashes and compares, and what the compiler consumes. It holds
// no buffers: Data nodes become numbered parameters, so the same structure
// with new values (a new batch, a new learning rate) is the same Graph.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/node.h"

namespace kiln::ir {

struct GraphNode {
  Op op;
  DType dtype;
  Shape shape;
  std::vector<int32_t> inputs;  // indices of earlier nodes
  Attrs attrs;                  // Data: ints[0] = parameter index
  bool operator==(const GraphNode&) const = default;
};

struct Graph {
  std::vector<GraphNode> nodes;  // topological order
  std::vector<int32_t> outputs;  // node indices, one per result
  std::vector<bool> donated;     // per parameter: its buffer may be overwritten
  int32_t num_params = 0;

  bool operator==(const Graph&) const = default;
  // Hash of everything above (structure, shapes, dtypes, attributes, donation).
  uint64_t hash() const;
  // Hash that ignores shapes: graphs differing only in shapes share it (used
  // to explain recompilations).
  uint64_t structure_hash() const;
  // HLO-like text, one node a line: "%3 = f32[8,128] add(%1, %2)".
  std::string dump() const;
  // Index of the node that is parameter p.
  int32_t param_node(int32_t p) const;
};

// Flattens the DAG under `outputs` (duplicates allowed). Data nodes become
// parameters, numbered in first-visit order and returned in `params`.
Graph flatten(const std::vector<NodePtr>& outputs, std::vector<NodePtr>* params);

}  // namespace kiln::ir
