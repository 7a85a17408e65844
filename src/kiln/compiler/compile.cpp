// Lowering of a simplified graph to a Program: fusion of elementwise groups,
// views of movement ops, kernels; then the passes of passes.h (scheduling,
// memory planning, donation).
#include "kiln/compiler/compile.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>

#include "kiln/compiler/passes.h"
#include "kiln/core/error.h"

namespace kiln::compiler {

using ir::Graph;
using ir::GraphNode;
using ir::Op;
using ir::OpKind;

View View::contiguous(const Shape& shape, int64_t offset) {
  return View{offset, shape, contiguous_strides(shape)};
}

bool View::is_broadcast_scalar() const {
  return std::all_of(strides.begin(), strides.end(), [](int64_t s) { return s == 0; });
}

bool View::is_contiguous() const {
  auto want = contiguous_strides(shape);
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] != 1 && strides[i] != want[i]) return false;
  return true;
}

std::vector<std::vector<int32_t>> users_of(const Graph& g) {
  std::vector<std::vector<int32_t>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int32_t in : g.nodes[i].inputs)
      if (users[in].empty() || users[in].back() != static_cast<int32_t>(i)) users[in].push_back(static_cast<int32_t>(i));
  return users;
}

int32_t add_slot(Program& prog, SlotKind kind, int32_t index, size_t nbytes) {
  prog.slots.push_back(Slot{kind, index, nbytes});
  return static_cast<int32_t>(prog.slots.size() - 1);
}

namespace {

enum class Cls { Param, Generator, View, Elementwise, Kernel };

Cls classify(Op op) {
  switch (ir::op_kind(op)) {
    case OpKind::Leaf: return Cls::Param;
    case OpKind::Generator: return Cls::Generator;
    case OpKind::Movement: return Cls::View;
    case OpKind::Elementwise: return Cls::Elementwise;
    default: return Cls::Kernel;
  }
}

// A matrix operand the GEMM kernel can read in place: the last two dims are
// row-major or column-major (transposed) with some leading dimension.
bool gemm_readable(const View& v) {
  size_t r = v.shape.size();
  int64_t rows = v.shape[r - 2], cols = v.shape[r - 1];
  int64_t sr = v.strides[r - 2], sc = v.strides[r - 1];
  bool row_major = (sc == 1 || cols == 1) && (sr >= cols || rows == 1) && sr > 0;
  bool col_major = (sr == 1 || rows == 1) && (sc >= rows || cols == 1) && sc > 0;
  return row_major || col_major;
}

// A [B, H, T, D] view whose heads are row-major matrices: D contiguous, rows
// at least D apart.
bool heads_readable(const View& v) {
  if (v.shape.size() != 4) return false;
  const int64_t T = v.shape[2], D = v.shape[3];
  return (v.strides[3] == 1 || D == 1) && (T == 1 || v.strides[2] >= D) && v.strides[0] >= 0 && v.strides[1] >= 0;
}

// The strides under which view v, reshaped to `shape`, reads the same
// elements in the same order without a copy, if there are such: each run of
// v's dimensions that the reshape merges or splits must be one stride apart
// in v (GPT-2's q, k and v: a [B, T, 768] slice of the [B, T, 2304]
// projection, split into [B, T, 12, 64] heads). Walks v's dimensions from the
// last, matching each such run to the new dimensions of the same count.
std::optional<std::vector<int64_t>> reshaped_strides(const View& v, const Shape& shape) {
  if (v.is_contiguous() || numel(v.shape) == 0) return contiguous_strides(shape);
  std::vector<int64_t> out(shape.size(), 0);
  int64_t d = static_cast<int64_t>(shape.size()) - 1;  // the next new dimension to give a stride, from the last
  int64_t base = v.strides.empty() ? 1 : v.strides.back();  // the stride of the current run's last dimension
  int64_t run = 1, made = 1;                                 // the run's elements in v, in the new dimensions
  for (int64_t k = static_cast<int64_t>(v.shape.size()) - 1; k >= 0; --k) {
    run *= v.shape[k];
    const bool run_ends = k == 0 || (v.shape[k - 1] != 1 && v.strides[k - 1] != run * base);
    if (!run_ends) continue;
    while (d >= 0 && (made < run || shape[d] == 1)) {
      out[d] = made * base;
      made *= shape[d];
      --d;
    }
    if (made != run) return std::nullopt;
    if (k > 0) {
      base = v.strides[k - 1];
      run = made = 1;
    }
  }
  if (d != -1) return std::nullopt;
  return out;
}

class Lowering {
 public:
  Lowering(const Graph& g, const CompileOptions& options) : g_(g), n_(g.nodes.size()), options_(options) {}

  Program run() {
    prog_.num_params = g_.num_params;
    prog_.output_nbytes.resize(g_.outputs.size());
    prog_.output_donor.assign(g_.outputs.size(), -1);
    analyse();
    for (size_t i = 0; i < n_; ++i) emit(static_cast<int32_t>(i));
    for (size_t o = 0; o < g_.outputs.size(); ++o) {
      int32_t node = g_.outputs[o];
      const auto& gn = g_.nodes[node];
      prog_.output_nbytes[o] = numel(gn.shape) * dtype_size(gn.dtype);
      if (output_slot_of_[o] < 0) {  // not written in place: copy the value out
        int32_t slot = new_slot(SlotKind::Output, static_cast<int32_t>(o), prog_.output_nbytes[o]);
        emit_copy(node, slot);
      }
    }
    if (options_.loss_with_gradient) merge_losses_into_gradients(prog_);
    if (options_.attention_probabilities) keep_attention_probabilities(prog_);
    if (options_.concurrent_products) pair_products(prog_);
    plan_memory(prog_, options_.in_place);
    donate(prog_, g_);
    return std::move(prog_);
  }

 private:
  const Graph& g_;
  size_t n_;
  CompileOptions options_;
  Program prog_;
  std::vector<Cls> cls_;
  std::vector<std::vector<int32_t>> users_;
  std::vector<std::vector<int32_t>> outputs_of_;  // node -> output numbers
  std::vector<int32_t> output_slot_of_;           // output -> slot written in place, or -1
  std::vector<bool> inline_gen_;
  std::vector<int32_t> group_;
  std::vector<bool> summed_;  // group roots run inside the Sum that reads them
  std::vector<int32_t> rider_;  // a group root's bf16 rounding, stored by the root's group (-1: none)
  std::vector<std::optional<Operand>> loc_;
  std::vector<std::optional<Operand>> contiguous_copy_;

  void analyse() {
    cls_.resize(n_);
    users_ = users_of(g_);
    outputs_of_.resize(n_);
    output_slot_of_.assign(g_.outputs.size(), -1);
    inline_gen_.assign(n_, false);
    group_.assign(n_, -1);
    loc_.resize(n_);
    contiguous_copy_.resize(n_);
    for (size_t i = 0; i < n_; ++i) cls_[i] = classify(g_.nodes[i].op);
    for (size_t o = 0; o < g_.outputs.size(); ++o) outputs_of_[g_.outputs[o]].push_back(static_cast<int32_t>(o));
    for (size_t i = 0; i < n_; ++i) {
      if (cls_[i] != Cls::Generator || !outputs_of_[i].empty()) continue;
      inline_gen_[i] = std::all_of(users_[i].begin(), users_[i].end(),
                                   [&](int32_t u) { return cls_[u] == Cls::Elementwise; });
    }
    // Fusion: an elementwise node joins its consumers' group when they are all
    // elementwise and in one group (then nothing outside the group reads it,
    // so groups cannot form a cycle). A node that is also a result is stored
    // by the group as a further output: AdamW's new moments join the
    // parameter update, and the clipped gradient both, in one pass.
    for (size_t k = n_; k-- > 0;) {
      if (cls_[k] != Cls::Elementwise) continue;
      const auto& u = users_[k];
      bool joins = !u.empty() && std::all_of(u.begin(), u.end(), [&](int32_t x) {
        return cls_[x] == Cls::Elementwise && group_[x] == group_[u[0]];
      });
      group_[k] = joins ? group_[u[0]] : static_cast<int32_t>(k);
    }
    summed_.assign(n_, false);
    if (options_.fuse_sum_inputs) mark_summed_groups();
    rider_.assign(n_, -1);
    if (options_.bf16_results) mark_riding_roundings();
  }

  // Whether node i is a rounding its input's group stores (rider_).
  bool rides(int32_t i) const {
    const GraphNode& n = g_.nodes[i];
    return n.op == Op::Cast && rider_[n.inputs[0]] == i;
  }

  // CompileOptions::bf16_results: autocast's rounding of a group's f32
  // result to bf16 (a Cast alone in its group: the f32 values have other
  // readers, such as the residual stream a LayerNorm's output joins, or the
  // bias gradient's sum beside a product's bf16 operand) is stored by the
  // group that computes the values, as a second output, instead of a pass
  // that reads them back. Only where nothing but elementwise work, views and
  // small kernels (that bias sum) lies between the two: the bf16 copy then
  // starts its life no earlier than those, and no peak grows.
  void mark_riding_roundings() {
    for (size_t c = 0; c < n_; ++c) {
      const GraphNode& cast = g_.nodes[c];
      if (cast.op != Op::Cast || cast.dtype != DType::bf16 || group_[c] != static_cast<int32_t>(c) ||
          !outputs_of_[c].empty())
        continue;
      const int32_t r = cast.inputs[0];
      const GraphNode& root = g_.nodes[r];
      if (cls_[r] != Cls::Elementwise || group_[r] != r || summed_[r] || rider_[r] >= 0 || root.dtype != DType::f32 ||
          root.shape != cast.shape || root.op == Op::Gelu || root.op == Op::GeluGrad)  // (the GELU's own loop)
        continue;
      bool near = true;
      for (size_t k = static_cast<size_t>(r) + 1; k < c && near; ++k)
        near = cls_[k] != Cls::Kernel || 8 * numel(g_.nodes[k].shape) <= numel(cast.shape);
      if (!near) continue;
      rider_[r] = static_cast<int32_t>(c);
    }
  }

  // A group whose root only a Sum over trailing axes reads (sum(g * g) of the
  // gradient norm), f32, none of its members a result, rows of 512+ values.
  void mark_summed_groups() {
    std::vector<bool> has_output(n_, false);
    for (size_t m = 0; m < n_; ++m)
      if (group_[m] >= 0 && !outputs_of_[m].empty()) has_output[group_[m]] = true;
    for (size_t i = 0; i < n_; ++i) {
      const GraphNode& n = g_.nodes[i];
      if (n.op != Op::Sum || n.dtype != DType::f32) continue;
      const int32_t k = n.inputs[0];
      const GraphNode& in = g_.nodes[k];
      const ir::ReduceAttrs r = ir::ReduceAttrs::of(n.attrs);
      const bool trailing = !in.shape.empty() && r.last() == static_cast<int64_t>(in.shape.size()) - 1;
      if (!trailing) continue;
      // Short rows would cost an interpreter pass per row: only rows of 512
      // values and more, or one row.
      const AxisSplit p = split_axes(in.shape, r.first(), r.last());
      if (cls_[k] == Cls::Elementwise && group_[k] == k && users_[k].size() == 1 && !has_output[k] &&
          in.dtype == DType::f32 && (p.axis >= 512 || p.outer == 1))
        summed_[k] = true;
    }
  }

  int32_t new_slot(SlotKind kind, int32_t index, size_t nbytes) { return add_slot(prog_, kind, index, nbytes); }

  size_t node_bytes(int32_t i) const { return numel(g_.nodes[i].shape) * dtype_size(g_.nodes[i].dtype); }

  // Where node i's result goes: its output buffer when it is a result (the
  // first time), otherwise a temporary.
  int32_t result_slot(int32_t i) {
    for (int32_t o : outputs_of_[i])
      if (output_slot_of_[o] < 0) {
        int32_t s = new_slot(SlotKind::Output, o, node_bytes(i));
        output_slot_of_[o] = s;
        return s;
      }
    return new_slot(SlotKind::Temp, 0, node_bytes(i));
  }

  Operand whole(int32_t slot, int32_t node) const {
    return Operand{slot, View::contiguous(g_.nodes[node].shape), g_.nodes[node].dtype};
  }

  void push(Instr ins) {
    if (ins.fused) ++prog_.num_fused;
    prog_.instrs.push_back(std::move(ins));
  }

  // A fused instruction that copies node's current view into `slot`.
  void emit_copy(int32_t node, int32_t slot) {
    Instr ins;
    ins.fused = true;
    ins.inputs.push_back(*loc_[node]);
    ins.output = whole(slot, node);
    ins.program.push_back(FusedStep{Op::Data, g_.nodes[node].dtype, -1, -1, -1, 0, {}});
    push(std::move(ins));
  }

  const Operand& contiguous(int32_t node) {
    KILN_ASSERT(loc_[node].has_value());
    if (loc_[node]->view.is_contiguous()) return *loc_[node];
    if (!contiguous_copy_[node]) {
      int32_t slot = new_slot(SlotKind::Temp, 0, node_bytes(node));
      emit_copy(node, slot);
      contiguous_copy_[node] = whole(slot, node);
    }
    return *contiguous_copy_[node];
  }

  void emit(int32_t i) {
    const GraphNode& n = g_.nodes[i];
    switch (cls_[i]) {
      case Cls::Param: {
        const auto param = static_cast<int32_t>(ir::ParamAttrs::of(n.attrs).index);
        int32_t slot = new_slot(SlotKind::Param, param, node_bytes(i));
        loc_[i] = whole(slot, i);
        return;
      }
      case Cls::Generator:
        if (!inline_gen_[i]) emit_group(i);
        return;
      case Cls::View:
        loc_[i] = view_of(i);
        return;
      case Cls::Elementwise:
        if (group_[i] == i && !summed_[i] && !rides(i)) emit_group(i);
        return;
      case Cls::Kernel:
        if (n.op == Op::Concat && options_.token_major_attention && concat_as_view(i)) return;
        emit_kernel(i);
        return;
    }
  }

  Operand view_of(int32_t i) {
    const GraphNode& n = g_.nodes[i];
    int32_t src = n.inputs[0];
    Operand op = *loc_[src];
    View& v = op.view;
    switch (n.op) {
      case Op::Reshape: {
        std::optional<std::vector<int64_t>> strides = reshaped_strides(v, n.shape);
        if (!strides) {  // a copy, then a view of it
          op = contiguous(src);
          strides = contiguous_strides(n.shape);
        }
        v.shape = n.shape;
        v.strides = std::move(*strides);
        break;
      }
      case Op::Permute: {
        View p = v;
        const std::vector<int64_t> perm = ir::PermuteAttrs::of(n.attrs).perm;
        for (size_t k = 0; k < perm.size(); ++k) {
          p.shape[k] = v.shape[perm[k]];
          p.strides[k] = v.strides[perm[k]];
        }
        v = p;
        break;
      }
      case Op::Broadcast: {
        size_t lead = n.shape.size() - v.shape.size();
        View b{v.offset, n.shape, std::vector<int64_t>(n.shape.size(), 0)};
        for (size_t k = 0; k < v.shape.size(); ++k)
          b.strides[k + lead] = v.shape[k] == n.shape[k + lead] ? v.strides[k] : 0;
        v = b;
        break;
      }
      case Op::Barrier:  // the same memory; the order is the graph's
        break;
      case Op::Slice: {
        const ir::SliceAttrs s = ir::SliceAttrs::of(n.attrs);
        const auto d = static_cast<size_t>(s.dim);
        v.offset += s.start * v.strides[d];
        v.strides[d] *= s.step;
        v.shape[d] = n.shape[d];
        break;
      }
      default:
        KILN_ASSERT(false);
    }
    return op;
  }

  void emit_group(int32_t root) {
    Group group = build_group(root);
    Instr& ins = group.ins;
    const int32_t rider = rider_[root];
    if (rider < 0) {
      ins.output = whole(result_slot(root), root);
      loc_[root] = ins.output;
    } else {  // the rounding is the program's last step, its output; the root's values a further one
      const int32_t values = group.reg.at(root);
      ins.program.push_back(FusedStep{Op::Cast, DType::bf16, values, -1, -1, -1, g_.nodes[rider].attrs});
      ins.output = whole(result_slot(rider), rider);
      loc_[rider] = ins.output;
      ins.extra_outputs.push_back(ExtraOutput{values, whole(result_slot(root), root)});
      loc_[root] = ins.extra_outputs.back().out;
    }
    for (int32_t m : group.members)
      if (m != root && !outputs_of_[m].empty()) {
        ins.extra_outputs.push_back(ExtraOutput{group.reg.at(m), whole(result_slot(m), m)});
        loc_[m] = ins.extra_outputs.back().out;
      }
    push(std::move(ins));
  }

  // A Sum of a group's values: the group's program, summed as it runs.
  void emit_summed_group(int32_t sum) {
    const GraphNode& n = g_.nodes[sum];
    const int32_t root = n.inputs[0];
    Instr ins = build_group(root).ins;
    ins.fused = false;
    ins.op = Op::Sum;
    ins.attrs = n.attrs;
    ins.program_shape = g_.nodes[root].shape;
    ins.output = whole(result_slot(sum), sum);
    loc_[sum] = ins.output;
    push(std::move(ins));
  }

  // A group's fused instruction without its outputs (the program and its
  // operands), its members in topological order and their registers.
  struct Group {
    Instr ins;
    std::vector<int32_t> members;
    std::map<int32_t, int32_t> reg;  // node -> register
  };
  Group build_group(int32_t root) {
    Group group;
    std::vector<int32_t>& members = group.members;
    // Members in topological order, collected from the root.
    std::vector<int32_t> todo{root};
    std::vector<bool> in_group(n_, false);
    in_group[root] = true;
    while (!todo.empty()) {
      int32_t m = todo.back();
      todo.pop_back();
      members.push_back(m);
      for (int32_t in : g_.nodes[m].inputs)
        if (group_[in] == root && !in_group[in]) {
          in_group[in] = true;
          todo.push_back(in);
        }
    }
    std::sort(members.begin(), members.end());

    Instr& ins = group.ins;
    ins.fused = true;
    std::map<int32_t, int32_t>& reg = group.reg;
    std::map<int32_t, int32_t> load;  // node -> operand index
    auto operand_of = [&](int32_t node, bool need_contiguous) {
      auto it = load.find(node);
      if (it != load.end()) return it->second;
      ins.inputs.push_back(need_contiguous ? contiguous(node) : *loc_[node]);
      return load[node] = static_cast<int32_t>(ins.inputs.size() - 1);
    };
    std::function<int32_t(int32_t)> value = [&](int32_t node) -> int32_t {
      auto it = reg.find(node);
      if (it != reg.end()) return it->second;
      const GraphNode& gn = g_.nodes[node];
      FusedStep step{gn.op, gn.dtype, -1, -1, -1, -1, gn.attrs};
      if (gn.op == Op::Constant) {
      } else if (gn.op == Op::RandUniform || gn.op == Op::RandNormal) {
        step.load = operand_of(gn.inputs[0], true);
      } else if (in_group[node]) {
        int32_t* args[3] = {&step.a, &step.b, &step.c};
        for (size_t k = 0; k < gn.inputs.size(); ++k) *args[k] = value(gn.inputs[k]);
      } else {
        step = FusedStep{Op::Data, gn.dtype, -1, -1, -1, operand_of(node, false), {}};
      }
      ins.program.push_back(std::move(step));
      return reg[node] = static_cast<int32_t>(ins.program.size() - 1);
    };
    auto source = [&](int32_t node) { return in_group[node] || inline_gen_[node] || (node == root); };
    // The operands in a stable order (members', then their inputs'); their
    // loads are emitted where first read, so a long sum of loaded values
    // (gradient clipping's ~200 norms) keeps two values live, not 200.
    for (int32_t m : members)
      if (cls_[m] == Cls::Elementwise)  // a generator's key is read by the generator itself
        for (int32_t in : g_.nodes[m].inputs) {
          if (source(in) || g_.nodes[in].op == Op::Constant) continue;
          const bool gen = g_.nodes[in].op == Op::RandUniform || g_.nodes[in].op == Op::RandNormal;
          operand_of(gen ? g_.nodes[in].inputs[0] : in, gen);
        }
    if (cls_[root] == Cls::Generator) in_group[root] = false;
    for (int32_t m : members) value(m);
    return group;
  }

  void emit_kernel(int32_t i) {
    const GraphNode& n = g_.nodes[i];
    if (n.op == Op::Sum && summed_[n.inputs[0]]) return emit_summed_group(i);
    Instr ins;
    ins.op = n.op;
    ins.attrs = n.attrs;
    for (int32_t in : n.inputs) {
      const size_t k = ins.inputs.size();
      const bool matrix = n.op == Op::MatMul && k < 2;  // not the bias
      // (AttentionGrad's forward result, k = size - 2, is not read by the CPU
      // kernel: whatever its layout, no copy.)
      const bool heads = options_.strided_attention_operands &&
                         ((n.op == Op::Attention && k < 3) ||
                          (n.op == Op::AttentionGrad && (k < 3 || k + 2 >= n.inputs.size())));
      const bool rows = options_.strided_row_sums && n.op == Op::Sum && n.dtype == DType::f32 &&
                        summed_row_stride(loc_[in]->view, ir::ReduceAttrs::of(n.attrs).first(),
                                          ir::ReduceAttrs::of(n.attrs).last()) > 0;
      if ((matrix && gemm_readable(loc_[in]->view)) || (heads && heads_readable(loc_[in]->view)) || rows)
        ins.inputs.push_back(*loc_[in]);
      else
        ins.inputs.push_back(contiguous(in));
    }
    int32_t slot = result_slot(i);
    ins.output = whole(slot, i);
    if (options_.token_major_attention && prog_.slots[slot].kind == SlotKind::Temp)
      ins.output.view = token_major(i, ins.output.view);
    loc_[i] = ins.output;
    push(std::move(ins));
  }

  // CompileOptions::token_major_attention: an Attention result that a
  // [0, 2, 1, 3] permutation reads is laid out as [B, T, H, D]; an
  // interleaved gradient ([3, B, H, T, D], see interleave_attention_grads)
  // as [B, T, 3, H, D].
  View token_major(int32_t i, View v) const {
    const GraphNode& n = g_.nodes[i];
    const auto to_tokens = [&](int32_t u) {
      return g_.nodes[u].op == Op::Permute &&
             ir::PermuteAttrs::of(g_.nodes[u].attrs).perm == std::vector<int64_t>{0, 2, 1, 3};
    };
    if (n.op == Op::Attention && std::any_of(users_[i].begin(), users_[i].end(), to_tokens)) {
      const int64_t H = n.shape[1], T = n.shape[2], D = n.shape[3];
      v.strides = {T * H * D, D, H * D, 1};
    } else if (n.op == Op::AttentionGrad && n.shape.size() == 5) {
      const int64_t B = n.shape[1], H = n.shape[2], T = n.shape[3], D = n.shape[4];
      if (n.dtype == DType::bf16 && !concatenated(i))  // [3, B, T, H, D]: see concatenated
        v.strides = {B * T * H * D, T * H * D, D, H * D, 1};
      else
        v.strides = {H * D, T * 3 * H * D, D, 3 * H * D, 1};
    }
    return v;
  }

  // Whether views of node i's result reach a Concat (GPT-2's dq, dk and dv,
  // merged into the gradient of one q/k/v projection). A bf16 attention
  // gradient that is not (BERT's, read by three projections' products) lays
  // dq, dk and dv out one after the other, each [B, T, H·D]: oneDNN's bf16
  // products with a bf16 result run slower on rows 3·H·D apart (bench: ~10 %
  // at 1024 x 768 x 768).
  bool concatenated(int32_t i) const {
    for (int32_t u : users_[i]) {
      const Op op = g_.nodes[u].op;
      if (op == Op::Concat) return true;
      if ((op == Op::Reshape || op == Op::Permute || op == Op::Slice) && concatenated(u)) return true;
    }
    return false;
  }

  // CompileOptions::token_major_attention: a Concat whose parts are views of
  // one buffer with the same strides, each starting where the one before
  // ends along the dim, is a view of that buffer (the interleaved attention
  // gradient's dq, dk and dv, merged back into [B, T, 3·H·D]).
  bool concat_as_view(int32_t i) {
    const GraphNode& n = g_.nodes[i];
    const auto d = static_cast<size_t>(ir::DimAttrs::of(n.attrs).dim);
    const Operand& first = *loc_[n.inputs[0]];
    int64_t at = first.view.offset;
    for (int32_t in : n.inputs) {
      const Operand& p = *loc_[in];
      if (p.slot != first.slot || p.dtype != first.dtype || p.view.strides != first.view.strides ||
          p.view.offset != at)
        return false;
      for (size_t k = 0; k < n.shape.size(); ++k)
        if (k != d && p.view.shape[k] != first.view.shape[k]) return false;
      at += p.view.shape[d] * p.view.strides[d];
    }
    Operand whole_view = first;
    whole_view.view.shape = n.shape;
    loc_[i] = whole_view;
    return true;
  }

};

}  // namespace

uint64_t CompileOptions::hash() const {
  static_assert(sizeof(CompileOptions) == 9, "a new option must enter CompileOptions::hash()");
  const bool flags[] = {fuse_sum_inputs,         strided_attention_operands, strided_row_sums,
                        concurrent_products,     in_place,                   loss_with_gradient,
                        token_major_attention,   attention_probabilities,    bf16_results};
  uint64_t h = 14695981039346656037ull;  // FNV-1a over the flags and the constants
  auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (bool f : flags) mix(f);
  mix(static_cast<uint64_t>(kKeptProbabilities));
  return h;
}

Program compile(const Graph& graph, const CompileOptions& options) {
  Graph g = simplify(graph);
  rematerialize_parameter_casts(g);
  if (options.bf16_results) {
    write_bf16_results(g);
    widen_in_readers(g);
  }
  if (options.token_major_attention) interleave_attention_grads(g);
  return Lowering(g, options).run();
}

std::vector<int32_t> last_reads(const Instr& fused) {
  const auto& prog = fused.program;
  const int32_t n = static_cast<int32_t>(prog.size());
  std::vector<int32_t> last(n, -1);
  for (int32_t k = 0; k < n; ++k)
    for (int32_t x : {prog[k].a, prog[k].b, prog[k].c})
      if (x >= 0) {
        KILN_ASSERT(x < k);
        last[x] = k;
      }
  if (n > 0) last[n - 1] = n;
  for (const auto& e : fused.extra_outputs) {
    KILN_ASSERT(e.reg >= 0 && e.reg < n);
    last[e.reg] = n;
  }
  return last;
}

std::vector<uint8_t> invariant_steps(const Instr& fused, bool (*also)(const Instr&, const View&)) {
  const auto& prog = fused.program;
  std::vector<uint8_t> invariant(prog.size(), 0);
  for (size_t k = 0; k < prog.size(); ++k) {
    const FusedStep& s = prog[k];
    bool args = false, all_invariant = true;
    for (int32_t x : {s.a, s.b, s.c})
      if (x >= 0) {
        args = true;
        all_invariant = all_invariant && invariant[x];
      }
    if (s.op == Op::Constant) invariant[k] = 1;
    else if (s.op == Op::Data)
      invariant[k] = fused.inputs[s.load].view.is_broadcast_scalar() || (also && also(fused, fused.inputs[s.load].view));
    else if (s.op != Op::RandUniform && s.op != Op::RandNormal) invariant[k] = args && all_invariant;
  }
  return invariant;
}

int64_t reduction_length(const Instr& matmul) {
  const bool ta = ir::MatMulAttrs::of(matmul.attrs).transpose_a;
  const Shape& a = matmul.inputs[0].view.shape;
  return a.size() >= 2 ? a[a.size() - (ta ? 2 : 1)] : 0;
}

int64_t summed_row_stride(const View& v, int64_t a0, int64_t a1) {
  const auto rank = static_cast<int64_t>(v.shape.size());
  if (a0 != 0 || a1 < 0 || a1 >= rank - 1 || v.strides.size() != v.shape.size()) return 0;
  int64_t inner = 1;
  for (int64_t d = rank - 1; d > a1; --d) {  // the kept axes: one contiguous row
    if (v.shape[d] != 1 && v.strides[d] != inner) return 0;
    inner *= v.shape[d];
  }
  int64_t ld = inner, next = 0;  // the summed axes: rows ld apart, in order (one row: any ld)
  bool first = true;
  for (int64_t d = a1; d >= 0; --d) {
    if (v.shape[d] == 1) continue;
    if (first) ld = v.strides[d], first = false;
    else if (v.strides[d] != next) return 0;
    next = v.strides[d] * v.shape[d];
  }
  return inner >= 2 && ld >= inner ? ld : 0;  // (a broadcast row, stride 0, is no such view)
}

bool computes_in_double(const Instr& fused) {
  auto integral = [](DType t) { return t == DType::i64 || t == DType::i32; };
  bool wide = integral(fused.output.dtype);
  for (const auto& e : fused.extra_outputs) wide = wide || integral(e.out.dtype);
  for (const auto& s : fused.program) wide = wide || integral(s.dtype);
  return wide;
}

std::string op_label(const Instr& ins) {
  if (ins.program.empty()) return ir::op_name(ins.op);
  std::string s = ins.fused ? "fused[" : std::string(ir::op_name(ins.op)) + " of fused[";
  for (size_t k = 0; k < ins.program.size(); ++k) s += (k ? " " : "") + std::string(ir::op_name(ins.program[k].op));
  return s + "]";
}

std::string Program::dump() const {
  std::ostringstream os;
  auto slot_name = [&](int32_t s) {
    const Slot& sl = slots[s];
    switch (sl.kind) {
      case SlotKind::Param: return "p" + std::to_string(sl.index);
      case SlotKind::Output: return "out" + std::to_string(sl.index);
      default: return "t" + std::to_string(s) + "@" + std::to_string(sl.offset);
    }
  };
  auto operand = [&](const Operand& o) {
    std::string s = slot_name(o.slot) + ":" + dtype_name(o.dtype) + to_string(o.view.shape);
    if (!o.view.is_contiguous()) s += "{strides " + to_string(o.view.strides) + "+" + std::to_string(o.view.offset) + "}";
    return s;
  };
  for (size_t k = 0; k < instrs.size(); ++k) {
    const Instr& ins = instrs[k];
    os << k << ": " << operand(ins.output) << " = ";
    os << op_label(ins);
    if (!ins.fused && !ins.program.empty()) os << " over " << to_string(ins.program_shape);
    os << "(";
    for (size_t i = 0; i < ins.inputs.size(); ++i) os << (i ? ", " : "") << operand(ins.inputs[i]);
    os << ")";
    for (const auto& e : ins.extra_outputs) {
      os << ", " << operand(e.out);
      if (e.reg >= 0) os << " = r" << e.reg;
    }
    if (ins.with_next) os << " (with the next)";
    os << "\n";
  }
  os << "arena " << arena_bytes << " bytes (unplanned " << temp_bytes_total << ")\n";
  return os.str();
}

}  // namespace kiln::compiler
