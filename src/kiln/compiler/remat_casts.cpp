// A graph rewrite before lowering (passes.h): bf16 copies of parameters made
// again for their late readers.
#include "kiln/compiler/compile.h"
#include "kiln/compiler/passes.h"

namespace kiln::compiler {

using ir::Graph;
using ir::GraphNode;
using ir::Op;

namespace {
// Readers this many nodes after the reader before them are late: a
// transformer layer's forward spans well under it, the distance from a
// layer's forward product to its input-gradient product (every later layer
// forward and backward) over it, but for the last layers.
constexpr int32_t kLateGap = 256;
}  // namespace

// Autocast's bf16 copy of a weight (a Cast of a parameter to bf16) is read by
// the forward's product and, in the backward, by the input gradient's
// product. Kept between them, every layer's copy is resident at the
// backward's start, the step's peak (GPT-2 124M: 170 MB, more than the bf16
// step saves elsewhere); made again right before the late readers, each copy
// lives only around its products, for one more cast of the weight a step.
void rematerialize_parameter_casts(Graph& g) {
  const size_t n = g.nodes.size();
  const std::vector<std::vector<int32_t>> users = users_of(g);
  std::vector<int32_t> late_from(n, -1);  // a copy's first late reader
  for (size_t i = 0; i < n; ++i) {
    const GraphNode& c = g.nodes[i];
    if (c.op != Op::Cast || c.dtype != DType::bf16 || g.nodes[c.inputs[0]].op != Op::Data) continue;
    const std::vector<int32_t>& u = users[i];
    for (size_t k = 1; k < u.size(); ++k)
      if (u[k] - u[k - 1] > kLateGap) {
        late_from[i] = u[k];
        break;
      }
  }
  Graph out;
  out.num_params = g.num_params;
  out.donated = g.donated;
  out.nodes.reserve(n);
  std::vector<int32_t> remap(n, -1), again(n, -1);  // again: the late readers' copy
  for (size_t i = 0; i < n; ++i) {
    GraphNode node = g.nodes[i];
    for (int32_t& in : node.inputs) {
      if (late_from[in] < 0 || static_cast<int32_t>(i) < late_from[in]) {
        in = remap[in];
        continue;
      }
      if (again[in] < 0) {
        GraphNode copy = g.nodes[in];
        copy.inputs[0] = remap[copy.inputs[0]];
        again[in] = static_cast<int32_t>(out.nodes.size());
        out.nodes.push_back(std::move(copy));
      }
      in = again[in];
    }
    remap[i] = static_cast<int32_t>(out.nodes.size());
    out.nodes.push_back(std::move(node));
  }
  for (int32_t o : g.outputs) out.outputs.push_back(remap[o]);
  g = std::move(out);
}

}  // namespace kiln::compiler
