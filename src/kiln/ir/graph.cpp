#include "kiln/ir/graph.h"

#include <cstring>
#include <sstream>
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kiln/core/error.h"

namespace kiln::ir {

namespace {
struct Hasher {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 1099511628211ull;
  }
  void add_double(double d) {
    uint64_t bits;
    static_assert(sizeof(bits) == sizeof(d));
    std::memcpy(&bits, &d, sizeof d);
    add(bits);
  }
};

uint64_t hash_graph(const Graph& g, bool with_shapes) {
  Hasher h;
  h.add(g.nodes.size());
  for (const auto& n : g.nodes) {
    h.add(static_cast<uint64_t>(n.op));
    h.add(static_cast<uint64_t>(n.dtype));
    h.add(n.shape.size());
    if (with_shapes)
      for (int64_t d : n.shape) h.add(static_cast<uint64_t>(d));
    h.add(n.inputs.size());
    for (int32_t i : n.inputs) h.add(static_cast<uint64_t>(i));
    // Attributes of movement ops restate shapes; skip them when shapes are ignored.
    if (with_shapes || !is_movement(n.op)) {
      for (int64_t v : n.attrs.ints) h.add(static_cast<uint64_t>(v));
      for (double v : n.attrs.floats) h.add_double(v);
    }
  }
  for (int32_t o : g.outputs) h.add(static_cast<uint64_t>(o));
  for (bool d : g.donated) h.add(d);
  return h.h;
}
}  // namespace

uint64_t Graph::hash() const { return hash_graph(*this, true); }
uint64_t Graph::structure_hash() const { return hash_graph(*this, false); }

int32_t Graph::param_node(int32_t p) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].op == Op::Data && ParamAttrs::of(nodes[i].attrs).index == p) return static_cast<int32_t>(i);
  KILN_ASSERT(false);
  return -1;
}

std::string Graph::dump() const {
  std::ostringstream os;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    os << "%" << i << " = " << dtype_name(n.dtype) << to_string(n.shape) << " " << op_name(n.op) << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", %" : "%") << n.inputs[k];
    os << ")";
    if (!n.attrs.ints.empty() || !n.attrs.floats.empty()) {
      os << " {";
      for (size_t k = 0; k < n.attrs.ints.size(); ++k) os << (k ? "," : "") << n.attrs.ints[k];
      if (!n.attrs.floats.empty()) os << ";";
      for (size_t k = 0; k < n.attrs.floats.size(); ++k) os << (k ? "," : "") << n.attrs.floats[k];
      os << "}";
    }
    os << "\n";
  }
  os << "outputs:";
  for (int32_t o : outputs) os << " %" << o;
  os << "\n";
  return os.str();
}

Graph flatten(const std::vector<NodePtr>& outputs, std::vector<NodePtr>* params) {
  Graph g;
  std::unordered_map<const Node*, int32_t> index;
  // Iterative post-order DFS (graphs of whole training steps are deep). The
  // stack points at the owning shared_ptrs, which outlive this call.
  std::vector<std::pair<const NodePtr*, size_t>> stack;
  auto visit = [&](const NodePtr& root) {
    if (index.count(root.get())) return;
    stack.push_back({&root, 0});
    while (!stack.empty()) {
      auto& [ptr, next] = stack.back();
      const Node* node = ptr->get();
      if (next < node->inputs.size()) {
        const NodePtr& in = node->inputs[next++];
        if (!index.count(in.get())) stack.push_back({&in, 0});
        continue;
      }
      if (!index.count(node)) {
        GraphNode gn{node->op, node->dtype, node->shape, {}, node->attrs};
        for (const auto& in : node->inputs) gn.inputs.push_back(index.at(in.get()));
        if (node->op == Op::Data) {
          gn.attrs = ParamAttrs{g.num_params++}.attrs();
          if (params) params->push_back(*ptr);
        }
        index[node] = static_cast<int32_t>(g.nodes.size());
        g.nodes.push_back(std::move(gn));
      }
      stack.pop_back();
    }
  };
  // Collectives first, in the order they were traced: replicas whose graphs
  // differ elsewhere (each updates its own parameters) still meet in the same
  // all-reduce at the same time. Each is placed right after its inputs.
  std::vector<const NodePtr*> collectives;
  {
    std::unordered_set<const Node*> seen;
    std::vector<const NodePtr*> todo;
    for (const auto& o : outputs) todo.push_back(&o);
    while (!todo.empty()) {
      const NodePtr* p = todo.back();
      todo.pop_back();
      if (!seen.insert(p->get()).second) continue;
      if ((*p)->op == Op::AllReduce || (*p)->op == Op::BroadcastFrom) collectives.push_back(p);
      for (const auto& in : (*p)->inputs) todo.push_back(&in);
    }
  }
  std::sort(collectives.begin(), collectives.end(), [](const NodePtr* a, const NodePtr* b) { return (*a)->seq < (*b)->seq; });
  for (const NodePtr* c : collectives) visit(*c);
  // Outputs newest first: a training step's results are the parameters (and
  // optimizer state) in model order, and the last layer's gradient is the
  // first the backward pass has. Visiting the first layer's first would
  // place the whole chain of input gradients before any weight gradient,
  // keeping every layer's intermediate gradients alive to the end.
  for (auto o = outputs.rbegin(); o != outputs.rend(); ++o) visit(*o);
  for (const auto& o : outputs) g.outputs.push_back(index.at(o.get()));
  g.donated.assign(g.num_params, false);
  return g;
}

}  // namespace kiln::ir
