// A graph rewrite before lowering (passes.h): kernels that write bf16 results
// where autocast rounds their f32 result at once.
#include <algorithm>
#include <utility>
#include <vector>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/passes.h"

namespace kiln::compiler {

using ir::Graph;
using ir::GraphNode;
using ir::Op;

namespace {

// The kernels that can: the CPU's product, cross-entropy gradient and
// attention gradient.
bool writes_bf16_results(Op op) {
  return op == Op::MatMul || op == Op::CrossEntropyGrad || op == Op::AttentionGrad;
}

bool is_view(Op op) { return op == Op::Reshape || op == Op::Permute || op == Op::Slice; }

// Whether every reader of node i reaches a Cast to bf16 through views only
// (none of them a result of the graph); collects the views and the casts.
bool read_only_rounded(int32_t i, const std::vector<std::vector<int32_t>>& users, const std::vector<bool>& result,
                       const Graph& g, std::vector<int32_t>& views, std::vector<int32_t>& casts) {
  if (users[i].empty() || result[i]) return false;
  for (int32_t u : users[i]) {
    const GraphNode& r = g.nodes[u];
    if (r.op == Op::Cast && r.dtype == DType::bf16) {
      casts.push_back(u);
    } else if (is_view(r.op)) {
      views.push_back(u);
      if (!read_only_rounded(u, users, result, g, views, casts)) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

// Autocast rounds a product's f32 result to bf16 where a bf16 value is what
// is read next: the forward's q, k and v (GPT-2: slices of one projection),
// and in the backward every input and weight gradient of a bf16 operand (the
// gradient of a bf16 value is bf16, then widened for the f32 tensor it came
// from); the logits' gradient is rounded for the LM head's products, and
// attention's dq, dk and dv for the q, k and v they belong to. The kernel
// writes the rounded values itself, half the bytes, and the separate pass
// that rounded them (reading and writing the f32 result) goes. The values are
// the same: a kernel with a bf16 result rounds its f32 result to the nearest
// bf16 (ties to even), as the Cast did.
//
// Then the widening of such a result moves past the views and
// concatenations that read it, and a rounding of a widened bf16 value is
// that value: GPT-2's dq, dk and dv, widened, merged into the [B, T, 3·H·D]
// gradient of the projection and rounded again for its products, become
// views of the attention gradient's bf16 result, as they are of its f32 one
// in an f32 step. An attention gradient with bf16 operands, which rounds the
// output's gradient to bf16 before its products, reads a widened bf16 one
// as it is.
void write_bf16_results(Graph& g) {
  const size_t n = g.nodes.size();
  const std::vector<std::vector<int32_t>> users = users_of(g);
  std::vector<bool> result(n, false), made(n, false);  // made: a bf16 result or a view of one
  for (int32_t o : g.outputs) result[o] = true;
  std::vector<int32_t> replaced(n, -1);  // a Cast that goes: the node its readers read instead
  for (size_t i = 0; i < n; ++i) {
    GraphNode& k = g.nodes[i];
    if (!writes_bf16_results(k.op) || k.dtype != DType::f32) continue;
    std::vector<int32_t> views, casts;
    if (!read_only_rounded(static_cast<int32_t>(i), users, result, g, views, casts)) continue;
    k.dtype = DType::bf16;
    made[i] = true;
    for (int32_t v : views) g.nodes[v].dtype = DType::bf16, made[v] = true;
    for (int32_t c : casts) replaced[c] = g.nodes[c].inputs[0];
  }
  Graph out;
  out.num_params = g.num_params;
  out.donated = g.donated;
  out.nodes.reserve(n);
  std::vector<int32_t> remap(n, -1);
  std::vector<bool> out_made;
  const auto push = [&](GraphNode node, bool from_made) {
    out.nodes.push_back(std::move(node));
    out_made.push_back(from_made);
    return static_cast<int32_t>(out.nodes.size() - 1);
  };
  // The bf16 value an out node widens, where that value is a made one; else -1.
  const auto widened = [&](int32_t j) {
    const GraphNode& c = out.nodes[j];
    return c.op == Op::Cast && c.dtype == DType::f32 && out_made[c.inputs[0]] ? c.inputs[0] : -1;
  };
  for (size_t i = 0; i < n; ++i) {
    if (replaced[i] >= 0) {
      remap[i] = remap[replaced[i]];
      continue;
    }
    GraphNode node = g.nodes[i];
    for (int32_t& in : node.inputs) in = remap[in];
    const bool all_widened = !node.inputs.empty() && std::all_of(node.inputs.begin(), node.inputs.end(),
                                                                 [&](int32_t in) { return widened(in) >= 0; });
    if (all_widened && node.dtype == DType::f32 &&
        ((is_view(node.op) && node.inputs.size() == 1) || node.op == Op::Concat)) {
      const Shape shape = node.shape;
      for (int32_t& in : node.inputs) in = widened(in);
      node.dtype = DType::bf16;
      const int32_t moved = push(std::move(node), true);
      remap[i] = push(GraphNode{Op::Cast, DType::f32, shape, {moved}, {}}, false);
      continue;
    }
    if (node.op == Op::Cast && node.dtype == DType::bf16 && widened(node.inputs[0]) >= 0) {
      remap[i] = widened(node.inputs[0]);
      continue;
    }
    if (node.op == Op::AttentionGrad && out.nodes[node.inputs[0]].dtype == DType::bf16 &&
        widened(node.inputs.back()) >= 0)
      node.inputs.back() = widened(node.inputs.back());  // dout: rounded to bf16 by the kernel anyway
    remap[i] = push(std::move(node), made[i]);
  }
  for (int32_t o : g.outputs) out.outputs.push_back(remap[o]);
  g = eliminate_dead(out);
}

// A bf16 value widened to f32 for several readers (a weight gradient: the
// gradient norm's sum of squares and the AdamW update; an input gradient: a
// LayerNorm's gradient and its bias's) is widened again inside each
// elementwise reader's fused group, and a Sum reads the bf16 value itself
// (the CPU's reduction widens as it loads: the same sums): the readers load
// 2 bytes an element instead of 4, and the f32 copy is stored only where
// another reader (a product, a normalisation) needs it, if one does.
void widen_in_readers(Graph& g) {
  const size_t n = g.nodes.size();
  const std::vector<std::vector<int32_t>> users = users_of(g);
  std::vector<bool> result(n, false), widening(n, false), kept(n, false);
  for (int32_t o : g.outputs) result[o] = true;
  // Readers that take the bf16 value: elementwise ones (their own widening)
  // and Sums (none).
  const auto takes_bf16 = [&](int32_t u) {
    const GraphNode& r = g.nodes[u];
    return ir::is_elementwise(r.op) || (r.op == Op::Sum && r.dtype == DType::f32);
  };
  for (size_t i = 0; i < n; ++i) {
    const GraphNode& c = g.nodes[i];
    if (c.op != Op::Cast || c.dtype != DType::f32 || g.nodes[c.inputs[0]].dtype != DType::bf16) continue;
    const auto& u = users[i];
    const auto taking = static_cast<size_t>(std::count_if(u.begin(), u.end(), takes_bf16));
    if (taking == 0 || (u.size() == 1 && ir::is_elementwise(g.nodes[u[0]].op))) continue;  // never, or fused already
    widening[i] = true;
    kept[i] = result[i] || taking < u.size();
  }
  Graph out;
  out.num_params = g.num_params;
  out.donated = g.donated;
  out.nodes.reserve(n);
  std::vector<int32_t> remap(n, -1);
  for (size_t i = 0; i < n; ++i) {
    GraphNode node = g.nodes[i];
    const bool own_copies = ir::is_elementwise(node.op);
    const bool sums_bf16 = node.op == Op::Sum && node.dtype == DType::f32;
    std::vector<std::pair<int32_t, int32_t>> copies;  // this reader's: widening node -> its copy
    for (int32_t& in : node.inputs) {
      if (widening[in] && sums_bf16) {
        in = remap[g.nodes[in].inputs[0]];
        continue;
      }
      if (!widening[in] || !own_copies) {
        in = remap[in];
        continue;
      }
      auto made = std::find_if(copies.begin(), copies.end(), [&](const auto& c) { return c.first == in; });
      if (made == copies.end()) {
        GraphNode copy = g.nodes[in];
        copy.inputs[0] = remap[copy.inputs[0]];
        copies.emplace_back(in, static_cast<int32_t>(out.nodes.size()));
        out.nodes.push_back(std::move(copy));
        made = copies.end() - 1;
      }
      in = made->second;
    }
    if (widening[i] && !kept[i]) continue;
    remap[i] = static_cast<int32_t>(out.nodes.size());
    out.nodes.push_back(std::move(node));
  }
  for (int32_t o : g.outputs) out.outputs.push_back(remap[o]);
  g = std::move(out);
}

}  // namespace kiln::compiler
