// Scheduling: where instructions run and what they compute together -- the
// attention gradient laid out token by token, the loss computed with its
// gradient, attention probabilities kept for the backward pass, and
// independent products paired to run side by side.
#include <algorithm>
#include <vector>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/passes.h"

namespace kiln::compiler {

using ir::Graph;
using ir::GraphNode;
using ir::Op;

// CompileOptions::token_major_attention: a self-attention gradient (q, k
// and v of one [B, H, T, D] shape), not a result, read only by its three
// slices [s·n, (s + 1)·n) (autodiff's dq, dk, dv), each read only by
// reshapes and not a result, gets the shape [3, B, H, T, D] and its slices
// [s, s + 1) of the first dim: the same values, in a shape the lowering can
// lay out token by token (Lowering::token_major).
void interleave_attention_grads(Graph& g) {
  const size_t n = g.nodes.size();
  const std::vector<std::vector<int32_t>> users = users_of(g);
  std::vector<bool> result(n, false);
  for (int32_t o : g.outputs) result[o] = true;
  for (size_t i = 0; i < n; ++i) {
    GraphNode& ag = g.nodes[i];
    if (ag.op != Op::AttentionGrad || result[i]) continue;
    const Shape qs = g.nodes[ag.inputs[0]].shape;
    if (qs.size() != 4 || g.nodes[ag.inputs[1]].shape != qs || g.nodes[ag.inputs[2]].shape != qs) continue;
    const int64_t count = numel(qs);
    const auto reshapes_only = [&](int32_t s) {
      return std::all_of(users[s].begin(), users[s].end(), [&](int32_t u) { return g.nodes[u].op == Op::Reshape; });
    };
    const auto part = [&](int32_t s) {
      const GraphNode& sl = g.nodes[s];
      if (sl.op != Op::Slice) return false;
      const ir::SliceAttrs a = ir::SliceAttrs::of(sl.attrs);
      return a.dim == 0 && a.step == 1 && a.start % count == 0 && a.end == a.start + count && !result[s] &&
             reshapes_only(s);
    };
    if (users[i].empty() || !std::all_of(users[i].begin(), users[i].end(), part)) continue;
    ag.shape = {3, qs[0], qs[1], qs[2], qs[3]};
    for (int32_t s : users[i]) {
      GraphNode& sl = g.nodes[s];
      const int64_t which = ir::SliceAttrs::of(sl.attrs).start / count;
      sl.attrs = ir::SliceAttrs{0, which, which + 1, 1}.attrs();
      sl.shape = {1, qs[0], qs[1], qs[2], qs[3]};
    }
  }
}

// CompileOptions::loss_with_gradient: a CrossEntropy whose gradient
// (CrossEntropyGrad over the same logits and labels, same attributes)
// comes later, with nothing in between reading the loss, is computed by
// the gradient's instruction as its extra output.
void merge_losses_into_gradients(Program& prog) {
  auto& instrs = prog.instrs;
  for (size_t k = 0; k < instrs.size(); ++k) {
    Instr& grad = instrs[k];
    if (grad.op != Op::CrossEntropyGrad || !grad.extra_outputs.empty()) continue;
    for (size_t j = k; j-- > 0;) {
      const Instr& loss = instrs[j];
      if (loss.op != Op::CrossEntropy || loss.attrs != grad.attrs || loss.inputs[0] != grad.inputs[0] ||
          loss.inputs[1] != grad.inputs[1])
        continue;
      const int32_t slot = loss.output.slot;
      const bool read_between = std::any_of(instrs.begin() + static_cast<std::ptrdiff_t>(j + 1),
                                            instrs.begin() + static_cast<std::ptrdiff_t>(k), [&](const Instr& i) {
                                              return std::any_of(i.inputs.begin(), i.inputs.end(),
                                                                 [&](const Operand& o) { return o.slot == slot; });
                                            });
      if (read_between) break;
      grad.extra_outputs.push_back(ExtraOutput{-1, loss.output});
      instrs.erase(instrs.begin() + static_cast<std::ptrdiff_t>(j));
      --k;
      break;
    }
  }
}

// CompileOptions::attention_probabilities: an AttentionGrad's forward
// result (input size - 2) names the Attention that wrote it; that one
// keeps its probabilities in a new temporary, which the gradient reads
// instead.
void keep_attention_probabilities(Program& prog) {
  auto& instrs = prog.instrs;
  for (Instr& grad : instrs) {
    // (Not with a sliding window or segments: the kernel's blocks then start past key 0.)
    if (grad.op != Op::AttentionGrad || grad.inputs.size() < 5) continue;
    ir::AttentionAttrs at = ir::AttentionAttrs::of(grad.attrs);
    if (at.kept_probs || at.has_segments || at.window > 0) continue;
    const Shape& q = grad.inputs[0].view.shape;
    const int64_t tk = grad.inputs[1].view.shape[2];
    if (q[2] * tk > CompileOptions::kKeptProbabilities) continue;
    Operand& result = grad.inputs[grad.inputs.size() - 2];
    const auto fwd = std::find_if(instrs.begin(), instrs.end(), [&](const Instr& i) {
      return i.op == Op::Attention && i.output.slot == result.slot && i.extra_outputs.empty() &&
             i.attrs == grad.attrs && i.inputs.size() + 2 == grad.inputs.size() &&
             std::equal(i.inputs.begin(), i.inputs.end(), grad.inputs.begin());
    });
    if (fwd == instrs.end()) continue;
    const int64_t n = q[0] * q[1] * q[2] * (tk + 1);
    const Operand kept{add_slot(prog, SlotKind::Temp, 0, static_cast<size_t>(n) * sizeof(float)), View::contiguous({n}),
                       DType::f32};
    fwd->extra_outputs.push_back(ExtraOutput{-1, kept});
    at.kept_probs = true;
    fwd->attrs = grad.attrs = at.attrs();
    result = kept;
  }
}

// CompileOptions::concurrent_products: a product is paired with a later
// one, up to kLookAhead instructions on, that reads none of the results in
// between; that one moves up next to it (what it skips does not read it:
// it came first). Both at least kMinPairFlops and neither over twice the
// other (a pair takes as long as its longer product). A linear layer's
// weight gradient is followed by its norm's square sum before the input
// gradient; the look-ahead steps over it.
void pair_products(Program& prog) {
  constexpr double kMinPairFlops = 2.0 * 128 * 128 * 128 * 16;
  constexpr size_t kLookAhead = 3;
  auto flops = [](const Instr& ins) {
    return 2.0 * static_cast<double>(reduction_length(ins)) * static_cast<double>(numel(ins.output.view.shape));
  };
  auto product = [&](const Instr& ins) {
    return ins.op == Op::MatMul && !ins.fused && ins.inputs.size() >= 2 && flops(ins) >= kMinPairFlops;
  };
  auto writes = [](const Instr& ins, int32_t slot) {
    if (ins.output.slot == slot) return true;
    return std::any_of(ins.extra_outputs.begin(), ins.extra_outputs.end(),
                       [&](const ExtraOutput& e) { return e.out.slot == slot; });
  };
  auto& instrs = prog.instrs;
  for (size_t k = 0; k + 1 < instrs.size(); ++k) {
    if (!product(instrs[k])) continue;
    const double fa = flops(instrs[k]);
    for (size_t j = k + 1; j < instrs.size() && j <= k + kLookAhead; ++j) {
      const Instr& b = instrs[j];
      const Op op = b.op;
      if (op == Op::AllReduce || op == Op::BroadcastFrom) break;  // collectives keep their place
      const double fb = product(b) ? flops(b) : 0.0;
      if (fb == 0.0 || std::max(fa, fb) > 2 * std::min(fa, fb)) continue;
      bool independent = true;  // b reads nothing written from k on
      for (size_t m = k; m < j && independent; ++m)
        for (const Operand& in : b.inputs) independent = independent && !writes(instrs[m], in.slot);
      if (!independent) continue;
      std::rotate(instrs.begin() + static_cast<std::ptrdiff_t>(k + 1), instrs.begin() + static_cast<std::ptrdiff_t>(j),
                  instrs.begin() + static_cast<std::ptrdiff_t>(j + 1));
      instrs[k].with_next = true;
      ++k;  // the moved product is taken
      break;
    }
  }
}

}  // namespace kiln::compiler
