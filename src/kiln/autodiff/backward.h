#pragma once
// Reverse-mode differentiation on the IR: backward() only adds nodes (one
// vjp rule per op, in vjp.cpp); nothing is computed until the step runs.
#include <utility>
#include <vector>

#include "kiln/ir/node.h"

namespace kiln::autodiff {

// Gradient nodes of d(sum(root * seed)) for every leaf under root that has a
// live grad_owner. seed has root's shape. Gradient nodes never require grad
// (no higher-order derivatives).
std::vector<std::pair<ir::NodePtr, ir::NodePtr>> backward(const ir::NodePtr& root, const ir::NodePtr& seed);

// Vector-Jacobian product of one node: one gradient per input (null where the
// input gets none). `self` is the node, `value` its result (self, or the Data
// node a step computed from it), `g` the gradient of its output.
std::vector<ir::NodePtr> vjp(const ir::NodePtr& self, const ir::NodePtr& value, const ir::NodePtr& g);

}  // namespace kiln::autodiff
