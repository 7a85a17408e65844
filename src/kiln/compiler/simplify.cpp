// CSE, identity removal, dead-code elimination and the placement of small
// results on a flattened graph.
#include <algorithm>
#include <optional>
#include <unordered_map>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/passes.h"
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

// g's nodes in `order` (a topological order of some of them, holding every
// output), renumbered.
Graph reordered(const Graph& g, const std::vector<int32_t>& order) {
  Graph out;
  out.num_params = g.num_params;
  out.donated = g.donated;
  std::vector<int32_t> remap(g.nodes.size(), -1);
  for (int32_t i : order) {
    GraphNode n = g.nodes[i];
    for (auto& in : n.inputs) in = remap[in];
    remap[i] = static_cast<int32_t>(out.nodes.size());
    out.nodes.push_back(std::move(n));
  }
  for (int32_t o : g.outputs) out.outputs.push_back(remap[o]);
  return out;
}

}  // namespace

Graph eliminate_dead(const Graph& g) {
  std::vector<bool> live(g.nodes.size(), false);
  for (int32_t o : g.outputs) live[o] = true;
  for (size_t i = g.nodes.size(); i-- > 0;)
    if (live[i])
      for (int32_t in : g.nodes[i].inputs) live[in] = true;
  std::vector<int32_t> order;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i]) order.push_back(static_cast<int32_t>(i));
  return reordered(g, order);
}

namespace {

// The gradients of adjacent slices of one value (GPT-2's q, k and v, cut from
// one projection) arrive as zero-padded slices added together: that sum is
// the slice gradient of their concatenation — one copy instead of padding
// each slice to the whole width and adding. n: Add(SliceGrad, SliceGrad).
void merge_adjacent_slice_grads(Graph& out, GraphNode& n) {
  const GraphNode& l = out.nodes[n.inputs[0]];
  const GraphNode& r = out.nodes[n.inputs[1]];
  const ir::SliceAttrs la = ir::SliceAttrs::of(l.attrs), ra = ir::SliceAttrs::of(r.attrs);
  const int64_t dim = la.dim;
  if (ra.dim != dim || la.step != 1 || ra.step != 1) return;
  auto extent = [&](const GraphNode& sg) { return out.nodes[sg.inputs[0]].shape[dim]; };
  const int64_t ls = la.start, le = ls + extent(l), rs = ra.start, re = rs + extent(r);
  if (le != rs && re != ls) return;
  const GraphNode& lo = le == rs ? l : r;
  const GraphNode& hi = le == rs ? r : l;
  // Concatenations of concatenations along the same dim are one.
  std::vector<int32_t> parts;
  for (int32_t part : {lo.inputs[0], hi.inputs[0]}) {
    const GraphNode& p = out.nodes[part];
    if (p.op == Op::Concat && ir::DimAttrs::of(p.attrs).dim == dim) parts.insert(parts.end(), p.inputs.begin(), p.inputs.end());
    else parts.push_back(part);
  }
  Shape cs = out.nodes[lo.inputs[0]].shape;
  cs[dim] += extent(hi);
  const int64_t start = std::min(ls, rs), end = std::max(le, re);
  out.nodes.push_back(GraphNode{Op::Concat, n.dtype, cs, parts, ir::Attrs{{dim}, {}}});
  n = GraphNode{Op::SliceGrad, n.dtype, n.shape, {static_cast<int32_t>(out.nodes.size() - 1)},
                ir::Attrs{{dim, start, end, 1}, {}}};
}

// Rewrites of f32 Add(x, y) where one operand has no other reader: `fold`
// gets the Add's graph, the Add and which operand (k), and returns the node
// that replaces the Add, or nothing.
template <typename Fold>
void fold_adds(Graph& g, Fold fold) {
  std::vector<int32_t> users(g.nodes.size(), 0);
  for (const auto& n : g.nodes)
    for (int32_t in : n.inputs) ++users[in];
  for (int32_t o : g.outputs) ++users[o];
  for (auto& n : g.nodes) {
    if (n.op != Op::Add || n.dtype != DType::f32) continue;
    for (int k = 0; k < 2; ++k) {
      if (users[n.inputs[k]] != 1) continue;
      if (std::optional<GraphNode> folded = fold(g, n, k)) {
        n = std::move(*folded);
        break;
      }
    }
  }
}

// A bias added to every row of a product that nothing else reads becomes the
// product's third input: the GEMM starts from the bias rows (beta = 1)
// instead of a separate pass reading and writing the product again (a
// linear layer whose output is also kept for backward, or fed to attention,
// would otherwise pay that pass). n: Add(MatMul, Broadcast(bias)) or the
// mirror; the bias is a vector of the product's last extent.
std::optional<GraphNode> bias_into_product(const Graph& g, const GraphNode& n, int k) {
  const GraphNode& m = g.nodes[n.inputs[k]];
  const GraphNode& b = g.nodes[n.inputs[1 - k]];
  if (m.op != Op::MatMul || m.inputs.size() != 2 || m.shape != n.shape || b.op != Op::Broadcast || n.shape.empty())
    return std::nullopt;
  // The broadcast's source, through reshapes, must be N values laid
  // along the last dim ([N] or [1, ..., 1, N]: reshapes keep the count).
  const int64_t N = n.shape.back();
  const Shape& bs = g.nodes[b.inputs[0]].shape;
  int32_t src = b.inputs[0];
  while (g.nodes[src].op == Op::Reshape) src = g.nodes[src].inputs[0];
  const GraphNode& v = g.nodes[src];
  if (v.dtype != DType::f32 || v.shape != Shape{N} || bs.empty() || bs.back() != N) return std::nullopt;
  GraphNode folded = m;
  folded.inputs.push_back(src);
  return folded;
}

// An embedding's gradient added to another gradient of the same table (tied
// input and output embeddings: GPT-2's wte, T5's shared) becomes the
// IndexAdd's third input: its rows go into that gradient rather than into a
// table of zeros that a separate pass then adds (GPT-2: two passes over
// 154 MB). Each id's rows are summed first and then added, as before.
// n: Add(x, IndexAdd(ids, src)) or the mirror, x of n's shape.
std::optional<GraphNode> sum_into_index_add(const Graph& g, const GraphNode& n, int k) {
  const GraphNode& ia = g.nodes[n.inputs[k]];
  const int32_t base = n.inputs[1 - k];
  if (ia.op != Op::IndexAdd || ia.inputs.size() != 2 || ia.shape != n.shape || g.nodes[base].shape != n.shape ||
      g.nodes[base].dtype != DType::f32)
    return std::nullopt;
  GraphNode folded = ia;
  folded.inputs.push_back(base);
  return folded;
}

// A result that nothing in the graph reads and that is much smaller than an
// operand (the loss over the logits, a metric) moves up to just after its
// operands. The traversal that orders a step places such a result where it
// meets it, after the whole backward pass; the loss would keep the logits
// alive to the end of the step, and the logits' gradient could not take
// their memory (GPT-2 at batch 4 x 256: 206 MB).
Graph hoist_small_results(const Graph& g) {
  const size_t n = g.nodes.size();
  std::vector<bool> read(n, false), hoisted(n, false);
  for (const auto& node : g.nodes)
    for (int32_t in : node.inputs) read[in] = true;
  std::vector<std::vector<int32_t>> after(n);  // hoisted nodes placed after node i
  auto bytes = [&](int32_t i) { return numel(g.nodes[i].shape) * dtype_size(g.nodes[i].dtype); };
  for (int32_t o : g.outputs) {
    const GraphNode& node = g.nodes[o];
    if (read[o] || hoisted[o] || node.inputs.empty()) continue;
    size_t largest = 0;
    int32_t last = -1;
    for (int32_t in : node.inputs) {
      largest = std::max(largest, bytes(in));
      last = std::max(last, in);
    }
    if (bytes(o) * 64 > largest || last + 1 == o) continue;
    hoisted[o] = true;
    after[last].push_back(o);
  }
  std::vector<int32_t> order;
  order.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (hoisted[i]) continue;
    order.push_back(static_cast<int32_t>(i));
    std::sort(after[i].begin(), after[i].end());
    order.insert(order.end(), after[i].begin(), after[i].end());
  }
  return reordered(g, order);
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
    if (n.op == Op::Cast && n.dtype == DType::bf16) {
      // bf16 widened to f32 and rounded back, through a reshape or not, is
      // itself (the loss's bf16 gradient that the autocast product takes).
      const GraphNode* wide = &input(0);
      if (wide->op == Op::Reshape) wide = &out.nodes[wide->inputs[0]];
      if (wide->op == Op::Cast && out.nodes[wide->inputs[0]].dtype == DType::bf16)
        n = GraphNode{Op::Reshape, DType::bf16, n.shape, {wide->inputs[0]}, {}};
    }
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
  fold_adds(out, bias_into_product);
  fold_adds(out, sum_into_index_add);
  return hoist_small_results(eliminate_dead(out));
}

}  // namespace kiln::compiler
