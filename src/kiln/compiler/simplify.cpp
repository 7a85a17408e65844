// CSE, identity removal and dead-code elimination on a flattened graph.
#include <algorithm>
#include <unordered_map>

#include "kiln/compiler/compile.h"
#include "kiln/core/error.h"

namespace kiln::compiler {

using ir::Graph;
using ir::GraphNode;
using ir::Op;

namespace {
uint64_t node_key(const GraphNode& n) {
  uint64_t h = static_cast<uint64_t>(n.op) * 1315423911u + static_cast<uint64_t>(n.dtype);
  auto mix = [&](uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (int64_t d : n.shape) mix(static_cast<uint64_t>(d));
  for (int32_t i : n.inputs) mix(static_cast<uint64_t>(i) + 7);
  for (int64_t v : n.attrs.ints) mix(static_cast<uint64_t>(v));
  for (double v : n.attrs.floats) mix(static_cast<uint64_t>(v * 1e9));
  return h;
}

Graph eliminate_dead(const Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (int32_t o : g.outputs) live[o] = true;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (live[i])
      for (int32_t in : g.nodes[i].inputs) live[in] = true;
  Graph out;
  out.num_params = g.num_params;
  out.donated = g.donated;
  std::vector<int32_t> remap(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live[i]) continue;
    GraphNode n = g.nodes[i];
    for (auto& in : n.inputs) in = remap[in];
    remap[i] = static_cast<int32_t>(out.nodes.size());
    out.nodes.push_back(std::move(n));
  }
  for (int32_t o : g.outputs) out.outputs.push_back(remap[o]);
  return out;
}
// The gradients of adjacent slices of one value (GPT-2's q, k and v, cut from
// one projection) arrive as zero-padded slices added together: that sum is
// the slice gradient of their concatenation — one copy instead of padding
// each slice to the whole width and adding. n: Add(SliceGrad, SliceGrad).
void merge_adjacent_slice_grads(Graph& out, GraphNode& n) {
  const GraphNode& l = out.nodes[n.inputs[0]];
  const GraphNode& r = out.nodes[n.inputs[1]];
  const int64_t dim = l.attrs.ints[0];
  if (r.attrs.ints[0] != dim || l.attrs.ints[3] != 1 || r.attrs.ints[3] != 1) return;
  auto extent = [&](const GraphNode& sg) { return out.nodes[sg.inputs[0]].shape[dim]; };
  const int64_t ls = l.attrs.ints[1], le = ls + extent(l), rs = r.attrs.ints[1], re = rs + extent(r);
  if (le != rs && re != ls) return;
  const GraphNode& lo = le == rs ? l : r;
  const GraphNode& hi = le == rs ? r : l;
  // Concatenations of concatenations along the same dim are one.
  std::vector<int32_t> parts;
  for (int32_t part : {lo.inputs[0], hi.inputs[0]}) {
    const GraphNode& p = out.nodes[part];
    if (p.op == Op::Concat && p.attrs.ints[0] == dim) parts.insert(parts.end(), p.inputs.begin(), p.inputs.end());
    else parts.push_back(part);
  }
  Shape cs = out.nodes[lo.inputs[0]].shape;
  cs[dim] += extent(hi);
  const int64_t start = std::min(ls, rs), end = std::max(le, re);
  out.nodes.push_back(GraphNode{Op::Concat, n.dtype, cs, parts, ir::Attrs{{dim}, {}}});
  n = GraphNode{Op::SliceGrad, n.dtype, n.shape, {static_cast<int32_t>(out.nodes.size() - 1)},
                ir::Attrs{{dim, start, end, 1}, {}}};
}

// A bias added to every row of a product that nothing else reads becomes the
// product's third input: the GEMM starts from the bias rows (beta = 1)
// instead of a separate pass reading and writing the product again (a
// linear layer whose output is also kept for backward, or fed to attention,
// would otherwise pay that pass). n: Add(MatMul, Broadcast(bias)) or the
// mirror; the bias is a vector of the product's last extent.
void fold_bias_into_products(Graph& g) {
  std::vector<int32_t> users(g.nodes.size(), 0);
  for (const auto& n : g.nodes)
    for (int32_t in : n.inputs) ++users[in];
  for (int32_t o : g.outputs) ++users[o];
  for (auto& n : g.nodes) {
    if (n.op != Op::Add || n.dtype != DType::f32) continue;
    for (int k = 0; k < 2; ++k) {
      const GraphNode& m = g.nodes[n.inputs[k]];
      const GraphNode& b = g.nodes[n.inputs[1 - k]];
      if (m.op != Op::MatMul || m.inputs.size() != 2 || users[n.inputs[k]] != 1 || m.shape != n.shape ||
          b.op != Op::Broadcast || n.shape.empty())
        continue;
      // The broadcast's source, through reshapes, must be N values laid
      // along the last dim ([N] or [1, ..., 1, N]: reshapes keep the count).
      const int64_t N = n.shape.back();
      const Shape& bs = g.nodes[b.inputs[0]].shape;
      int32_t src = b.inputs[0];
      while (g.nodes[src].op == Op::Reshape) src = g.nodes[src].inputs[0];
      const GraphNode& v = g.nodes[src];
      if (v.dtype != DType::f32 || v.shape != Shape{N} || bs.empty() || bs.back() != N) continue;
      GraphNode folded = m;
      folded.inputs.push_back(src);
      n = std::move(folded);
      break;
    }
  }
}

}  // namespace

Graph simplify(const Graph& g) {
  Graph out;
  out.num_params = g.num_params;
  out.donated = g.donated;
  std::vector<int32_t> remap(g.nodes.size(), -1);
  std::unordered_map<uint64_t, std::vector<int32_t>> seen;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    GraphNode n = g.nodes[i];
    for (auto& in : n.inputs) in = remap[in];
    auto input = [&](int k) -> const GraphNode& { return out.nodes[n.inputs[k]]; };
    if (n.op == Op::Reshape && input(0).op == Op::Reshape) n.inputs[0] = input(0).inputs[0];
    if (n.op == Op::Detach || (n.op == Op::Cast && input(0).dtype == n.dtype) ||
        ((n.op == Op::Reshape || n.op == Op::Broadcast) && input(0).shape == n.shape)) {
      remap[i] = n.inputs[0];
      continue;
    }
    if (n.op == Op::Add && input(0).op == Op::SliceGrad && input(1).op == Op::SliceGrad)
      merge_adjacent_slice_grads(out, n);
    if (n.op == Op::SliceGrad && input(0).shape == n.shape) {  // the whole range: no zeros around it
      remap[i] = n.inputs[0];
      continue;
    }
    if ((n.op == Op::Reshape || n.op == Op::Broadcast) && input(0).op == Op::Constant) {
      // A constant seen through a reshape or broadcast is the same constant.
      n = GraphNode{Op::Constant, n.dtype, n.shape, {}, input(0).attrs};
    }
    uint64_t key = node_key(n);
    int32_t found = -1;
    if (n.op != Op::Data)
      for (int32_t cand : seen[key])
        if (out.nodes[cand] == n) {
          found = cand;
          break;
        }
    if (found >= 0) {
      remap[i] = found;
      continue;
    }
    remap[i] = static_cast<int32_t>(out.nodes.size());
    seen[key].push_back(remap[i]);
    out.nodes.push_back(std::move(n));
  }
  for (int32_t o : g.outputs) out.outputs.push_back(remap[o]);
  fold_bias_into_products(out);
  return eliminate_dead(out);
}

}  // namespace kiln::compiler
