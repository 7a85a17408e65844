#include "kiln/autodiff/backward.h"

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
}  // namespace

std::vector<std::pair<NodePtr, NodePtr>> backward(const NodePtr& root, const NodePtr& seed) {
  KILN_CHECK(root->requires_grad, "backward: the tensor does not require grad (no input requires grad, "
                                  "or it was computed under no_grad)");
  KILN_CHECK(seed->shape == root->shape, "backward: gradient shape ", to_string(seed->shape),
             " does not match output shape ", to_string(root->shape));
  ir::GradMode::Disable no_grad;

  // Post-order over the nodes a gradient reaches; leaves stop the walk.
  std::vector<const NodePtr*> order;
  std::unordered_map<const Node*, bool> visited;
  std::vector<std::pair<const NodePtr*, size_t>> stack{{&root, 0}};
  visited[root.get()] = true;
  while (!stack.empty()) {
    auto& [ptr, next] = stack.back();
    const Node& n = **ptr;
    const NodePtr* child = is_grad_leaf(n) ? nullptr : grad_input(n, next);
    if (child) {
      ++next;
      const NodePtr& in = *child;
      if (in->requires_grad && !visited[in.get()]) {
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
    if (is_grad_leaf(*n)) {
      result.emplace_back(n, g);
      continue;
    }
    if (n->grad_source) {  // gradient passes to the expression, whose value is n
      value_of[n->grad_source.get()] = n;
      auto& acc = grads[n->grad_source.get()];
      acc = acc ? ir::binary(ir::Op::Add, acc, g) : g;
      continue;
    }
    auto v = value_of.find(n.get());
    std::vector<NodePtr> gs = vjp(n, v != value_of.end() ? v->second : n, g);
    KILN_ASSERT(gs.size() == n->inputs.size());
    for (size_t i = 0; i < gs.size(); ++i) {
      const NodePtr& in = n->inputs[i];
      if (!gs[i] || !in->requires_grad) continue;
      KILN_ASSERT(gs[i]->shape == in->shape);
      auto& acc = grads[in.get()];
      acc = acc ? ir::binary(ir::Op::Add, acc, gs[i]) : gs[i];
    }
  }
  return result;
}

}  // namespace kiln::autodiff
