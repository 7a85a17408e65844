#include "kiln/runtime/ops.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "kiln/core/env.h"
#include "kiln/core/error.h"
#include "kiln/distributed/replica.h"
#include "kiln/ir/builder.h"
#include "kiln/runtime/autocast.h"

namespace kiln {

using ir::Op;

namespace {
Tensor wrap(ir::NodePtr n) { return Tensor(std::move(n)); }
Tensor bin(Op op, const Tensor& a, const Tensor& b) { return wrap(ir::binary(op, a.node(), b.node())); }
Tensor un(Op op, const Tensor& x) { return wrap(ir::unary(op, x.node())); }
}  // namespace

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  return wrap(ir::constant(value, shape, dtype, device));
}
Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor arange(int64_t n, DType dtype, Device device) { return wrap(ir::iota(n, 0, 1, dtype, device)); }
Tensor arange(double start, double end, double step, DType dtype, Device device) {
  KILN_CHECK(step != 0, "arange: step must be non-zero");
  int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((end - start) / step)));
  return wrap(ir::iota(n, start, step, dtype, device));
}

Tensor scalar_like(double v, const Tensor& like) {
  DType t = like.dtype();
  if (t == DType::b8 || (t != DType::f32 && v != std::floor(v))) t = DType::f32;
  return wrap(ir::constant(v, {}, t, like.device()));
}

Tensor add(const Tensor& a, const Tensor& b) { return bin(Op::Add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return bin(Op::Sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return bin(Op::Mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return bin(Op::Div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return bin(Op::Pow, a, b); }
Tensor pow(const Tensor& a, double e) {
  if (e == 2.0) return mul(a, a);
  return pow(a, scalar_like(e, a));
}
Tensor maximum(const Tensor& a, const Tensor& b) { return bin(Op::Max, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return bin(Op::Min, a, b); }
Tensor neg(const Tensor& x) { return un(Op::Neg, x); }
Tensor exp(const Tensor& x) { return un(Op::Exp, x); }
Tensor log(const Tensor& x) { return un(Op::Log, x); }
Tensor tanh(const Tensor& x) { return un(Op::Tanh, x); }
Tensor erf(const Tensor& x) { return un(Op::Erf, x); }
Tensor sqrt(const Tensor& x) { return un(Op::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return un(Op::Rsqrt, x); }
Tensor abs(const Tensor& x) { return un(Op::Abs, x); }
Tensor sigmoid(const Tensor& x) { return un(Op::Sigmoid, x); }
Tensor silu(const Tensor& x) { return un(Op::Silu, x); }
Tensor relu(const Tensor& x) { return un(Op::Relu, x); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
             approximate, "'");
  // Under Autocast on f32 values, GELU of them rounded to bf16, as torch's
  // autocast computes it on the bf16 a product gives: that product then
  // writes bf16 (compiler/bf16_results.cpp) and the backward keeps the
  // pre-activation in half the memory.
  const bool bf16 = Autocast::active() && x.dtype() == DType::f32;
  return wrap(ir::gelu(bf16 ? ir::cast(ir::cast(x.node(), DType::bf16), DType::f32) : x.node(), approximate == "tanh"));
}
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  KILN_CHECK(x.rank() >= 1 && x.shape().back() > 0 && x.shape().back() % 2 == 0,
             "rope: x must end in a positive, even head_dim, got ", to_string(x.shape()));
  const Tensor c = cast(cos, DType::f32), s = cast(sin, DType::f32);
  auto op = [](const Tensor& a, const Tensor& b, const Tensor& d) {
    return wrap(ir::make_op(Op::Rope, {a.node(), b.node(), d.node()}, ir::RopeAttrs{}));
  };
  if (ir::RopeAttrs::takes(x.shape(), c.shape(), s.shape())) return op(x, c, s);
  const Shape rows{1, 1, x.numel() / x.shape().back(), x.shape().back()};
  auto as_rows = [&](const Tensor& t) { return reshape(broadcast_to(t, x.shape()), rows); };
  return reshape(op(reshape(x, rows), as_rows(c), as_rows(s)), x.shape());
}
Tensor eq(const Tensor& a, const Tensor& b) { return bin(Op::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return bin(Op::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return bin(Op::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return bin(Op::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return bin(Op::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return bin(Op::Ge, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return bin(Op::And, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return bin(Op::Or, a, b); }
Tensor logical_not(const Tensor& x) { return un(Op::Not, x); }
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return wrap(ir::where(c.node(), a.node(), b.node())); }
Tensor cast(const Tensor& x, DType dtype) { return wrap(ir::cast(x.node(), dtype)); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, double b) { return add(a, scalar_like(b, a)); }
Tensor operator-(const Tensor& a, double b) { return sub(a, scalar_like(b, a)); }
Tensor operator*(const Tensor& a, double b) { return mul(a, scalar_like(b, a)); }
Tensor operator/(const Tensor& a, double b) { return div(a, scalar_like(b, a)); }
Tensor operator+(double a, const Tensor& b) { return add(scalar_like(a, b), b); }
Tensor operator-(double a, const Tensor& b) { return sub(scalar_like(a, b), b); }
Tensor operator*(double a, const Tensor& b) { return mul(scalar_like(a, b), b); }
Tensor operator/(double a, const Tensor& b) { return div(scalar_like(a, b), b); }

Tensor sum(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return wrap(ir::reduce(Op::Sum, x.node(), axes, keepdim));
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  KILN_CHECK(x.dtype() == DType::f32, "mean: expected an f32 tensor, got ", dtype_name(x.dtype()));
  int64_t count = 1;
  if (axes.empty()) count = x.numel();
  else
    for (int64_t a : axes) count *= x.shape()[normalize_axis(a, x.rank(), "mean")];
  return sum(x, axes, keepdim) * (1.0 / static_cast<double>(count));
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& axes, bool keepdim) {
  return wrap(ir::reduce(Op::ReduceMax, x.node(), axes, keepdim));
}
Tensor argmax(const Tensor& x, int64_t axis, bool keepdim) { return wrap(ir::argmax(x.node(), axis, keepdim)); }

Tensor reshape(const Tensor& x, const Shape& shape) { return wrap(ir::reshape(x.node(), shape)); }
Tensor view(const Tensor& x, const Shape& shape) { return reshape(x, shape); }
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm) { return wrap(ir::permute(x.node(), perm)); }
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) { return wrap(ir::transpose(x.node(), d0, d1)); }
Tensor broadcast_to(const Tensor& x, const Shape& shape) { return wrap(ir::broadcast_to(x.node(), shape)); }
Tensor unsqueeze(const Tensor& x, int64_t dim) {
  Shape s = x.shape();
  int64_t d = normalize_axis(dim, x.rank() + 1, "unsqueeze");
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}
Tensor squeeze(const Tensor& x, int64_t dim) {
  Shape s = x.shape();
  int64_t d = normalize_axis(dim, x.rank(), "squeeze");
  KILN_CHECK(s[d] == 1, "squeeze: dim ", dim, " of shape ", to_string(s), " is not 1");
  s.erase(s.begin() + d);
  return reshape(x, s);
}
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return wrap(ir::slice(x.node(), dim, start, end, step));
}
Tensor concat(const std::vector<Tensor>& xs, int64_t dim) {
  std::vector<ir::NodePtr> nodes;
  for (const auto& x : xs) nodes.push_back(x.node());
  return wrap(ir::concat(nodes, dim));
}
Tensor index_select(const Tensor& table, const Tensor& ids) { return wrap(ir::index_select(table.node(), ids.node())); }
Tensor embedding(const Tensor& ids, const Tensor& table, int64_t padding_idx) {
  KILN_CHECK(padding_idx < table.dim(0), "embedding: padding_idx ", padding_idx, " out of range for ", table.dim(0), " rows");
  // A bf16 table (a frozen one kept bf16) gives f32 rows, as every activation is.
  ir::NodePtr rows = ir::index_select(table.node(), ids.node(), padding_idx);
  return wrap(table.dtype() == DType::bf16 ? ir::cast(rows, DType::f32) : rows);
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return wrap(ir::gather(x.node(), dim, index.node())); }
Tensor scatter_add(const Tensor& base, int64_t dim, const Tensor& index, const Tensor& src) {
  return wrap(ir::scatter_add(base.node(), dim, index.node(), src.node()));
}
Tensor index_copy(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  return wrap(ir::index_copy(x.node(), dim, index.node(), src.node()));
}

namespace {
// A product's floating operand as the product takes it: bf16 under Autocast.
ir::NodePtr product_operand(const Tensor& x) {
  return Autocast::active() && is_floating(x.dtype()) ? autocast_bf16(x) : x.node();
}
// Outside Autocast a bf16 operand (a frozen weight kept bf16) is widened to
// f32 (exact) when the other one is f32.
ir::NodePtr product_operand(const Tensor& x, const Tensor& other) {
  if (Autocast::active()) return autocast_bf16(x);
  return x.dtype() != other.dtype() ? ir::cast(x.node(), DType::f32) : x.node();
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  if (is_floating(a.dtype()) && is_floating(b.dtype()))
    return wrap(ir::matmul(product_operand(a, b), product_operand(b, a), ta, tb));
  return wrap(ir::matmul(a.node(), b.node(), ta, tb));
}
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  KILN_CHECK(weight.rank() == 2, "linear: weight must be [out, in], got ", to_string(weight.shape()));
  Tensor y = matmul(x, weight, false, true);
  return bias.defined() ? y + bias : y;
}

Tensor softmax(const Tensor& x, int64_t axis, const Tensor& mask) {
  return wrap(ir::softmax(x.node(), axis, mask.defined() ? mask.node() : nullptr));
}
Tensor log_softmax(const Tensor& x, int64_t axis, const Tensor& mask) {
  return wrap(ir::log_softmax(x.node(), axis, mask.defined() ? mask.node() : nullptr));
}
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  Shape c{x.shape().empty() ? 1 : x.shape().back()};
  KILN_CHECK(!weight.defined() || weight.shape() == c, "layer_norm: weight ", to_string(weight.shape()),
             " does not match the normalised dim ", to_string(c), " of input ", to_string(x.shape()));
  KILN_CHECK(!bias.defined() || bias.shape() == c, "layer_norm: bias ", to_string(bias.shape()),
             " does not match the normalised dim ", to_string(c), " of input ", to_string(x.shape()));
  Tensor y = wrap(ir::normalize(x.node(), eps));
  if (weight.defined()) y = y * weight;
  if (bias.defined()) y = y + bias;
  return y;
}
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, int64_t ignore_index, double label_smoothing) {
  // Under Autocast the loss takes the logits as torch's autocast products
  // give them, rounded to bf16 (transformers' loss then widens them: f32
  // sums, as here). On the CPU the product then writes bf16 logits and their
  // gradient takes their place (compiler/bf16_results.cpp, in_place): a
  // causal LM's largest tensor in half the memory, once. The CUDA kernels
  // take f32 logits.
  const bool bf16 = Autocast::active() && logits.dtype() == DType::f32 && logits.device().kind == DeviceKind::CPU;
  return wrap(ir::cross_entropy(bf16 ? ir::cast(logits.node(), DType::bf16) : logits.node(), labels.node(),
                                ignore_index, label_smoothing));
}
Tensor mse_loss(const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.shape() == target.shape(), "mse_loss: input ", to_string(input.shape()), " and target ",
             to_string(target.shape()), " differ");
  Tensor d = input - target;
  return mean(d * d);
}
Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& y) {
  KILN_CHECK(x.shape() == y.shape(), "binary_cross_entropy_with_logits: logits ", to_string(x.shape()),
             " and targets ", to_string(y.shape()), " differ");
  // max(x, 0) - x·y + log(1 + exp(-|x|)), the stable form
  Tensor z = zeros_like(x);
  return mean(maximum(x, z) - x * y + log(1.0 + exp(-abs(x))));
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionSpec& spec) {
  KILN_CHECK(spec.dropout == 0.0 || spec.gen, "attention: dropout ", spec.dropout, " needs a generator");
  KILN_CHECK(q.rank() == 4 && k.rank() == 4, "attention: q and k must be [batch, heads, seq, head_dim], got ",
             to_string(q.shape()), " and ", to_string(k.shape()));
  ir::NodePtr key;
  if (spec.dropout > 0.0) key = spec.gen->next_key(q.device(), {q.dim(0), q.dim(1), q.dim(2), k.dim(2)}).node();
  return wrap(ir::attention(product_operand(q), product_operand(k), product_operand(v),
                            spec.mask.defined() ? spec.mask.node() : nullptr, key, spec.causal, spec.scale,
                            spec.dropout, spec.window, spec.segments.defined() ? spec.segments.node() : nullptr));
}

bool fused_attention_takes_segments(const Tensor& q) { return q.device().kind == DeviceKind::CPU; }

bool use_fused_attention(const Tensor& q, const Tensor& k, const Tensor& mask) {
  static const std::string mode = env_choice("KILN_ATTENTION", {"auto", "fused", "composite"});
  if (mode == "composite" || q.rank() != 4 || k.rank() != 4) return false;
  if (mask.defined() &&
      (mask.requires_grad() || mask.dtype() != DType::f32 || !ir::attention_takes_mask(mask.shape(), q.dim(0), k.dim(2))))
    return false;
  if (mode == "fused" || q.device().kind == DeviceKind::CPU) return true;
  const int64_t D = q.dim(3);
  return q.device().kind == DeviceKind::CUDA && Autocast::active() && (D == 16 || D == 32 || D == 64);
}

Tensor Generator::next_key(Device device, const Shape& shape) {
  int64_t first = 0;
  if (sample_base_ != 0 && !shape.empty() && shape[0] > 0) first = sample_base_ * (numel(shape) / shape[0]);
  std::vector<int64_t> key{static_cast<int64_t>(seed_), static_cast<int64_t>(offset_++), first};
  return Tensor::from_vector(key, {3}, device, "rng_key");
}

Tensor rand(const Shape& shape, Generator& gen, Device device) {
  return wrap(ir::rand_uniform(gen.next_key(device, shape).node(), shape));
}
Tensor randn(const Shape& shape, Generator& gen, Device device) {
  return wrap(ir::rand_normal(gen.next_key(device, shape).node(), shape));
}
Tensor bernoulli(const Shape& shape, double p, Generator& gen, Device device) {
  return lt(rand(shape, gen, device), full({}, p, DType::f32, device));
}
Tensor dropout(const Tensor& x, double p, Generator& gen, bool training) {
  KILN_CHECK(p >= 0.0 && p < 1.0, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0.0) return x;
  Tensor keep = ge(rand(x.shape(), gen, x.device()), full({}, p, DType::f32, x.device()));
  return where(keep, x * (1.0 / (1.0 - p)), zeros({}, DType::f32, x.device()));
}

namespace {
thread_local bool recomputing = false;

struct GeneratorState {
  uint64_t seed, offset;
  int64_t sample_base;
  static GeneratorState of(const Generator& g) { return {g.seed(), g.offset(), g.sample_base()}; }
  void restore(Generator& g) const {
    g.set_state(seed, offset);
    g.set_sample_base(sample_base);
  }
};
}  // namespace

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                  Generator* gen) {
  const GeneratorState before = gen ? GeneratorState::of(*gen) : GeneratorState{};
  Tensor y = fn(inputs);
  if (recomputing || !ir::GradMode::enabled() || !y.requires_grad()) return y;
  for (const auto& x : inputs)
    if (x.node() == y.node()) return y;  // fn handed an input through: nothing to recompute
  auto rc = std::make_shared<ir::Recompute>();
  for (const auto& x : inputs) rc->inputs.push_back(x.node());
  // The recomputation runs inside backward(): with the forward's autocast
  // state (as torch.utils.checkpoint restores it), or its products would not
  // be the ones whose gradients it stands for.
  rc->fn = [fn, gen, before, autocast = Autocast::active()](const std::vector<ir::NodePtr>& xs) {
    Autocast same_precision(autocast);
    struct Scope {
      Generator* gen;
      GeneratorState now;
      bool prev = recomputing;
      ~Scope() {
        if (gen) now.restore(*gen);
        recomputing = prev;
      }
    } scope{gen, gen ? GeneratorState::of(*gen) : GeneratorState{}};
    recomputing = true;
    if (gen) before.restore(*gen);
    std::vector<Tensor> ts;
    for (const auto& x : xs) ts.emplace_back(x);
    return fn(ts).node();
  };
  y.node()->recompute = std::move(rc);
  return y;
}

Tensor all_reduce(const std::vector<Tensor>& tensors, double scale) {
  const ReplicaInfo& me = this_replica();
  std::vector<ir::NodePtr> nodes;
  for (const auto& t : tensors) {
    KILN_CHECK(t.device() == me.device, "all_reduce: a tensor is on ", t.device().str(), " but this thread is replica ",
               me.local_index, " on ", me.device.str());
    nodes.push_back(t.node());
  }
  return wrap(ir::all_reduce(nodes, me.group, me.local_index, scale));
}

Tensor broadcast_from(const std::vector<Tensor>& tensors, const std::vector<int64_t>& roots) {
  const ReplicaInfo& me = this_replica();
  std::vector<ir::NodePtr> nodes;
  for (const auto& t : tensors) {
    KILN_CHECK(t.device() == me.device, "broadcast_from: a tensor is on ", t.device().str(),
               " but this thread is replica ", me.local_index, " on ", me.device.str());
    nodes.push_back(t.node());
  }
  for (int64_t r : roots)
    KILN_CHECK(r >= 0 && r < me.world_size(), "broadcast_from: root ", r, " is not a replica (world size ",
               me.world_size(), ")");
  return wrap(ir::broadcast_from(nodes, me.group, me.local_index, roots));
}

}  // namespace kiln
