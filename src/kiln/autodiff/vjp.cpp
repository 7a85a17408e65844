// One vjp rule per op. Each rule quotes the forward it differentiates.
#include <cmath>
#include <numeric>

#include "kiln/autodiff/backward.h"
#include "kiln/core/error.h"
#include "kiln/ir/builder.h"

namespace kiln::autodiff {

using ir::NodePtr;
using ir::Op;

namespace {
NodePtr scalar(double v, const NodePtr& like) { return ir::constant(v, {}, like->dtype, like->device); }
NodePtr add(const NodePtr& a, const NodePtr& b) { return ir::binary(Op::Add, a, b); }
NodePtr sub(const NodePtr& a, const NodePtr& b) { return ir::binary(Op::Sub, a, b); }
NodePtr mul(const NodePtr& a, const NodePtr& b) { return ir::binary(Op::Mul, a, b); }
NodePtr div(const NodePtr& a, const NodePtr& b) { return ir::binary(Op::Div, a, b); }
NodePtr mul(const NodePtr& a, double s) { return mul(a, scalar(s, a)); }
NodePtr zeros_like(const NodePtr& x) { return ir::constant(0.0, x->shape, x->dtype, x->device); }
NodePtr as_f32(const NodePtr& b) { return ir::cast(b, DType::f32); }
// rotate_half(x) = [-x2, x1] over the last axis; its transpose is -rotate_half.
NodePtr rotate_half(const NodePtr& x) {
  const int64_t axis = x->rank() - 1, D = x->shape[axis];
  return ir::concat({ir::unary(Op::Neg, ir::slice(x, axis, D / 2, D)), ir::slice(x, axis, 0, D / 2)}, axis);
}

// y = x·cos + R(x)·sin (R = rotate_half), or with transpose y = x·cos - R(x·sin).
// dx is the other rotation of g: (diag(cos) + diag(sin) R)ᵀ = diag(cos) - R diag(sin).
// cos and sin (constant tables in the models) sum g·x and g·R(x) (transpose:
// x·R(g)) over the axes they broadcast along.
std::vector<NodePtr> vjp_rope(const NodePtr& self, const NodePtr& g) {
  const auto& in = self->inputs;
  const bool transpose = ir::RopeAttrs::of(self->attrs).transpose;
  std::vector<NodePtr> out(3);
  if (in[0]->requires_grad)
    out[0] = ir::cast(ir::make_op(Op::Rope, {g, in[1], in[2]}, ir::RopeAttrs{!transpose}), in[0]->dtype);
  const NodePtr x = as_f32(in[0]);
  if (in[1]->requires_grad) out[1] = ir::sum_to(mul(g, x), in[1]->shape);
  if (in[2]->requires_grad)
    out[2] = ir::sum_to(transpose ? mul(x, rotate_half(g)) : mul(g, rotate_half(x)), in[2]->shape);
  return out;
}

// The rules of the products and the composites (vjp's other ops).
std::vector<NodePtr> vjp_contraction_or_composite(const NodePtr& self, const NodePtr& value, const NodePtr& g) {
  const auto& in = self->inputs;
  const auto& at = self->attrs;
  switch (self->op) {
    case Op::MatMul: {  // y = op(a) · op(b), op = optional transpose of the last two dims
      const auto [ta, tb] = ir::MatMulAttrs::of(at);
      const NodePtr &a = in[0], &b = in[1];
      // bf16 operands: the gradient products take g in bf16 too (as under
      // torch.autocast), give f32 sums, and the operands' gradients are
      // rounded to bf16 after any batch sum.
      const NodePtr gm = ir::cast(g, a->dtype);
      NodePtr da, db;
      if (a->requires_grad)
        da = ta ? ir::matmul(b, gm, tb, true) : ir::matmul(gm, b, false, !tb);
      if (b->requires_grad) {
        if (b->rank() == 2 && a->rank() > 2 && !ta) {
          // A shared weight: fold a's batch dims into rows, one GEMM
          // (Σ_batch aᵀg = a_flatᵀ g_flat) instead of a batched product + sum.
          NodePtr a2 = ir::reshape(a, {-1, a->shape.back()});
          NodePtr g2 = ir::reshape(gm, {-1, g->shape.back()});
          db = tb ? ir::matmul(g2, a2, true, false) : ir::matmul(a2, g2, true, false);
        } else {
          db = tb ? ir::matmul(gm, a, true, ta) : ir::matmul(a, gm, !ta, false);
        }
      }
      return {da ? ir::cast(ir::sum_to(da, a->shape), a->dtype) : nullptr,
              db ? ir::cast(ir::sum_to(db, b->shape), b->dtype) : nullptr};
    }
    case Op::Softmax: {  // y = softmax(x + mask)
      NodePtr dx = ir::softmax_grad(value, g, ir::AxisAttrs::of(at).axis);
      if (in.size() > 1) return {dx, dx};
      return {dx};
    }
    case Op::LogSoftmax: {  // y = log_softmax(x + mask)
      NodePtr dx = ir::log_softmax_grad(value, g, ir::AxisAttrs::of(at).axis);
      if (in.size() > 1) return {dx, dx};
      return {dx};
    }
    case Op::Normalize:  // y = (x - mean) / sqrt(var + eps)
      return {ir::normalize_grad(in[0], g, ir::NormalizeAttrs::of(at).eps)};
    case Op::CrossEntropy:
      return {ir::cross_entropy_grad(in[0], in[1], g, ir::CrossEntropyAttrs::of(at).ignore_index,
                                     ir::CrossEntropyAttrs::of(at).smoothing),
              nullptr};
    case Op::Attention: {  // y = dropout(softmax(scale·q kᵀ, causal, + mask)) v
      KILN_CHECK(!ir::AttentionAttrs::of(at).has_mask || !in[3]->requires_grad,
                 "backward: fused attention gives no gradient to its mask (use the composite for a learned bias)");
      const NodePtr grads = ir::attention_grad(self, value, g);
      std::vector<NodePtr> out(in.size());
      int64_t off = 0;
      for (size_t k = 0; k < 3; ++k) {
        const int64_t n = numel(in[k]->shape);
        if (in[k]->requires_grad)
          out[k] = ir::cast(ir::reshape(ir::slice(grads, 0, off, off + n, 1), in[k]->shape), in[k]->dtype);
        off += n;
      }
      return out;
    }
    case Op::Rope:
      return vjp_rope(self, g);
    default:
      throw Error(std::string("backward: op '") + ir::op_name(self->op) + "' has no gradient");
  }
}
}  // namespace

std::vector<NodePtr> vjp(const NodePtr& self, const NodePtr& value, const NodePtr& g) {
  const auto& in = self->inputs;
  const auto& at = self->attrs;
  switch (self->op) {
    case Op::Neg:  // y = -x
      return {ir::unary(Op::Neg, g)};
    case Op::Exp:  // y = exp(x)
      return {mul(g, value)};
    case Op::Log:  // y = log(x)
      return {div(g, in[0])};
    case Op::Tanh:  // y = tanh(x): dy/dx = 1 - y²
      return {mul(g, sub(scalar(1.0, value), mul(value, value)))};
    case Op::Erf: {  // y = erf(x): dy/dx = 2/√π · exp(-x²)
      NodePtr e = ir::unary(Op::Exp, ir::unary(Op::Neg, mul(in[0], in[0])));
      return {mul(mul(g, e), 2.0 / std::sqrt(M_PI))};
    }
    case Op::Sqrt:  // y = √x: dy/dx = 1 / (2y)
      return {div(mul(g, 0.5), value)};
    case Op::Rsqrt:  // y = x^-½: dy/dx = -½ y³
      return {mul(mul(g, mul(value, mul(value, value))), -0.5)};
    case Op::Abs: {  // y = |x|: dy/dx = sign(x)
      NodePtr zero = scalar(0.0, in[0]);
      NodePtr sign = sub(as_f32(ir::binary(Op::Gt, in[0], zero)), as_f32(ir::binary(Op::Lt, in[0], zero)));
      return {mul(g, sign)};
    }
    case Op::Sigmoid:  // y = σ(x): dy/dx = y (1 - y)
      return {mul(g, mul(value, sub(scalar(1.0, value), value)))};
    case Op::Silu: {  // y = x σ(x): dy/dx = σ(x) (1 + x (1 - σ(x)))
      NodePtr s = ir::unary(Op::Sigmoid, in[0]);
      return {mul(g, mul(s, add(scalar(1.0, s), mul(in[0], sub(scalar(1.0, s), s)))))};
    }
    case Op::Relu:  // y = max(x, 0)
      return {ir::where(ir::binary(Op::Gt, in[0], scalar(0.0, in[0])), g, scalar(0.0, g))};
    case Op::Gelu:  // y = gelu(x)
      return {ir::gelu_grad(in[0], g, ir::GeluAttrs::of(at).tanh_form)};
    case Op::Add:
      return {g, g};
    case Op::Sub:
      return {g, ir::unary(Op::Neg, g)};
    case Op::Mul:  // y = a b
      return {mul(g, in[1]), mul(g, in[0])};
    case Op::Div:  // y = a / b: dy/db = -y / b
      return {div(g, in[1]), ir::unary(Op::Neg, div(mul(g, value), in[1]))};
    case Op::Pow: {  // y = a^b: dy/da = b a^(b-1), dy/db = y log a
      NodePtr da = mul(g, mul(in[1], ir::binary(Op::Pow, in[0], sub(in[1], scalar(1.0, in[1])))));
      NodePtr db = in[1]->requires_grad ? mul(g, mul(value, ir::unary(Op::Log, in[0]))) : nullptr;
      return {da, db};
    }
    case Op::Max:
    case Op::Min: {  // y = max(a, b): the larger input gets g; ties split it (as torch)
      Op wins = self->op == Op::Max ? Op::Gt : Op::Lt;
      NodePtr half = mul(as_f32(ir::binary(Op::Eq, in[0], in[1])), 0.5);
      NodePtr wa = add(as_f32(ir::binary(wins, in[0], in[1])), half);
      NodePtr wb = add(as_f32(ir::binary(wins, in[1], in[0])), half);
      return {mul(g, wa), mul(g, wb)};
    }
    case Op::Where:  // y = c ? a : b
      return {nullptr, ir::where(in[0], g, scalar(0.0, g)), ir::where(in[0], scalar(0.0, g), g)};
    case Op::Sum:  // y = Σ_axes x (dims kept)
      return {ir::broadcast_to(g, in[0]->shape)};
    case Op::ReduceMax: {  // y = max_axes x: g shared among the maxima
      NodePtr hit = as_f32(ir::binary(Op::Eq, in[0], ir::broadcast_to(value, in[0]->shape)));
      NodePtr count = ir::reduce(Op::Sum, hit, ir::ReduceAttrs::of(at).axes, true);
      return {mul(hit, ir::broadcast_to(div(g, count), in[0]->shape))};
    }
    case Op::Reshape:
      return {ir::reshape(g, in[0]->shape)};
    case Op::Permute: {
      const std::vector<int64_t> perm = ir::PermuteAttrs::of(at).perm;
      std::vector<int64_t> inv(perm.size());
      for (size_t i = 0; i < inv.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
      return {ir::permute(g, inv)};
    }
    case Op::Broadcast:
      return {ir::sum_to(g, in[0]->shape)};
    case Op::Slice: {
      const auto s = ir::SliceAttrs::of(at);
      return {ir::slice_grad(g, in[0]->shape, s.dim, s.start, s.end, s.step)};
    }
    case Op::SliceGrad: {
      const auto s = ir::SliceAttrs::of(at);
      return {ir::slice(g, s.dim, s.start, s.end, s.step)};
    }
    case Op::Barrier:
      return {g, nullptr};
    case Op::Concat: {
      std::vector<NodePtr> out;
      int64_t d = ir::DimAttrs::of(at).dim, off = 0;
      for (const auto& x : in) {
        out.push_back(ir::slice(g, d, off, off + x->shape[d], 1));
        off += x->shape[d];
      }
      return out;
    }
    case Op::IndexSelect:  // y = table[ids]
      return {ir::index_add(in[1], g, in[0]->shape[0], ir::PaddingAttrs::of(at).padding_idx), nullptr};
    case Op::IndexAdd:  // y = zeros.index_add(ids, src)
      return {nullptr, ir::index_select(g, in[0], -1)};
    case Op::Gather:  // y = gather(x, d, index)
      return {ir::scatter_add(zeros_like(in[0]), ir::DimAttrs::of(at).dim, in[1], g), nullptr};
    case Op::ScatterAdd:  // y = base.scatter_add(d, index, src)
      return {g, nullptr, ir::gather(g, ir::DimAttrs::of(at).dim, in[1])};
    case Op::IndexCopy: {  // y = x.index_copy(d, index, src): src's slices replace x's, index distinct
      const int64_t d = ir::DimAttrs::of(at).dim;
      Shape along(in[0]->shape.size(), 1);
      along[d] = in[1]->shape[0];
      NodePtr index = ir::broadcast_to(ir::reshape(in[1], along), in[2]->shape);
      NodePtr zeros = ir::constant(0.0, in[2]->shape, g->dtype, g->device);
      return {ir::index_copy(g, d, in[1], zeros), nullptr, ir::gather(g, d, index)};
    }
    case Op::Cast:  // y = x as another dtype: the gradient in x's dtype (f32 <-> bf16)
      return {is_floating(in[0]->dtype) ? ir::cast(g, in[0]->dtype) : nullptr};
    default:
      return vjp_contraction_or_composite(self, value, g);
  }
}

}  // namespace kiln::autodiff
