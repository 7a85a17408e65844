#pragma once
// An IR node: one operation on its inputs, with its result's shape and dtype
// known when it is created. Nodes form a DAG owned through shared_ptr; a
// user's tensor holds the node of its value (see runtime/tensor.h). Data
// nodes are leaves holding a device Buffer: the values from earlier steps
// and from the host. Nothing here computes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/buffer.h"
#include "kiln/core/device.h"
#include "kiln/core/dtype.h"
#include "kiln/core/shape.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/op.h"

namespace kiln::ir {

struct Node;
using NodePtr = std::shared_ptr<Node>;

// Gradient checkpointing: the output of a segment whose activations the
// backward pass does not keep. backward() rebuilds the segment with `fn` on
// its inputs (seen through Barrier nodes) when the output's gradient exists,
// and differentiates the rebuilt copy.
struct Recompute {
  std::vector<NodePtr> inputs;
  std::function<NodePtr(const std::vector<NodePtr>&)> fn;
};

struct Node {
  Op op;
  DType dtype;
  Shape shape;
  Device device;
  std::vector<NodePtr> inputs;
  Attrs attrs;

  // Autodiff: true when a gradient can flow to this node from a loss.
  bool requires_grad = false;
  // Set on leaves whose gradient is accumulated into a user's tensor (an
  // opaque owner: runtime::TensorImpl). Expired or empty elsewhere.
  std::weak_ptr<void> grad_owner;

  // Data nodes only.
  std::shared_ptr<Buffer> data;
  std::string name;  // for messages and compile reasons, e.g. "input_ids"
  // A differentiable value that a step computed: the expression it came
  // from, through which backward() still differentiates.
  NodePtr grad_source;

  // Set on a checkpointed segment's output (see Recompute).
  std::shared_ptr<const Recompute> recompute;

  // Collectives: their trace order (see flatten(): every replica runs its
  // collectives in this order, whatever else its graph holds).
  uint64_t seq = 0;

  int64_t numel() const { return kiln::numel(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

}  // namespace kiln::ir
