#include "kiln/autodiff/backward.h"

#include <functional>
#include <string>
#include <unordered_map>

#include "kiln/core/error.h"
#include "kiln/ir/builder.h"

namespace kiln::autodiff {

using ir::Node;
using ir::NodePtr;

namespace {
bool is_grad_leaf(const Node& n) { return !n.grad_owner.expired(); }
// The k-th node a gradient flows to from n: its inputs, or for a computed
// value only the expression it came from. Null past the end.
const NodePtr* grad_input(const Node& n, size_t k) {
  if (n.grad_source) return k == 0 ? &n.grad_source : nullptr;
  return k < n.inputs.size() ? &n.inputs[k] : nullptr;
}

using Visited = std::unordered_map<const Node*, bool>;
using Stop = std::function<bool(const Node&)>;

std::vector<std::pair<NodePtr, NodePtr>> propagate(const NodePtr& root, const NodePtr& seed, const Stop& stop);

void accumulate(NodePtr& acc, const NodePtr& g) { acc = acc ? ir::binary(ir::Op::Add, acc, g) : g; }

// A checkpointed segment's output n got its gradient g: rebuild the segment
// on its inputs seen through barriers after g (so the copy runs late and CSE
// keeps it apart from the original), differentiate the copy, and hand the
// gradients that leave it — to the inputs, to the weights, to anything else
// of the outer graph it read — back to the outer walk.
void recompute_segment(const NodePtr& n, const NodePtr& g, const Visited& outer,
                       std::unordered_map<const Node*, NodePtr>& grads) {
  const ir::Recompute& rc = *n->recompute;
  std::unordered_map<const Node*, NodePtr> input_of;  // barrier -> segment input
  std::vector<NodePtr> xs;
  NodePtr y;
  {
    ir::GradMode::Enable grad_on;
    for (const auto& x : rc.inputs) {
      if (!x->requires_grad) {
        xs.push_back(x);
        continue;
      }
      xs.push_back(ir::barrier(x, g));
      input_of[xs.back().get()] = x;
    }
    y = rc.fn(xs);
  }
  KILN_CHECK(y && y->shape == n->shape && y->requires_grad, "gradient checkpointing: the recomputed segment gave ",
             y ? to_string(y->shape) : std::string("nothing"), " instead of ", to_string(n->shape),
             " (the segment must be a function of its inputs and weights)");
  auto leaves = propagate(y, g, [&](const Node& m) { return input_of.count(&m) > 0 || outer.count(&m) > 0; });
  for (auto& [m, gm] : leaves) {
    auto in = input_of.find(m.get());
    accumulate(grads[in != input_of.end() ? in->second.get() : m.get()], gm);
  }
}

// Gradients of d(sum(root * seed)) for the nodes where `stop` holds.
std::vector<std::pair<NodePtr, NodePtr>> propagate(const NodePtr& root, const NodePtr& seed, const Stop& stop) {
  // Post-order over the nodes a gradient reaches; stop nodes end the walk.
  std::vector<const NodePtr*> order;
  Visited visited;
  std::vector<std::pair<const NodePtr*, size_t>> stack{{&root, 0}};
  visited[root.get()] = true;
  while (!stack.empty()) {
    auto& [ptr, next] = stack.back();
    const Node& n = **ptr;
    const NodePtr* child = stop(n) ? nullptr : grad_input(n, next);
    if (child) {
      ++next;
      const NodePtr& in = *child;
      if (in->requires_grad && !visited.count(in.get())) {
        visited[in.get()] = true;
        stack.push_back({&in, 0});
      }
      continue;
    }
    order.push_back(ptr);
    stack.pop_back();
  }

  std::unordered_map<const Node*, NodePtr> grads;
  std::unordered_map<const Node*, NodePtr> value_of;
  grads[root.get()] = seed;
  std::vector<std::pair<NodePtr, NodePtr>> result;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const NodePtr& n = **it;
    auto found = grads.find(n.get());
    if (found == grads.end()) continue;
    NodePtr g = std::move(found->second);
    grads.erase(found);
    if (stop(*n)) {
      result.emplace_back(n, g);
      continue;
    }
    if (n->grad_source) {  // gradient passes to the expression, whose value is n
      value_of[n->grad_source.get()] = n;
      accumulate(grads[n->grad_source.get()], g);
      continue;
    }
    if (n->recompute) {
      recompute_segment(n, g, visited, grads);
      continue;
    }
    auto v = value_of.find(n.get());
    std::vector<NodePtr> gs = vjp(n, v != value_of.end() ? v->second : n, g);
    KILN_ASSERT(gs.size() == n->inputs.size());
    for (size_t i = 0; i < gs.size(); ++i) {
      const NodePtr& in = n->inputs[i];
      if (!gs[i] || !in->requires_grad) continue;
      KILN_ASSERT(gs[i]->shape == in->shape);
      accumulate(grads[in.get()], gs[i]);
    }
  }
  return result;
}

}  // namespace

std::vector<std::pair<NodePtr, NodePtr>> backward(const NodePtr& root, const NodePtr& seed) {
  KILN_CHECK(root->requires_grad, "backward: the tensor does not require grad (no input requires grad, "
                                  "or it was computed under no_grad)");
  KILN_CHECK(seed->shape == root->shape, "backward: gradient shape ", to_string(seed->shape),
             " does not match output shape ", to_string(root->shape));
  ir::GradMode::Disable no_grad;
  return propagate(root, seed, [](const Node& n) { return is_grad_leaf(n); });
}

}  // namespace kiln::autodiff
