#pragma once
// Op constructors: validate the inputs, infer the result's shape and dtype,
// create the node. Errors name the op and the shapes involved. Elementwise
// ops take equal shapes at the IR level: broadcasting inserts explicit
// Broadcast nodes, so kernels and vjp rules never broadcast implicitly.
#include <vector>

#include "kiln/ir/node.h"

namespace kiln::ir {

// Whether new nodes record gradient information (thread-local, like
// torch.no_grad). Scoped: GradMode::Disable guard;
class GradMode {
 public:
  static bool enabled();
  static void set(bool enabled);
  // Scoped: grad mode `On` until the end of the scope.
  template <bool On>
  struct Set {
    Set() : prev_(enabled()) { set(On); }
    ~Set() { set(prev_); }
    Set(const Set&) = delete;
    Set& operator=(const Set&) = delete;

   private:
    bool prev_;
  };
  using Disable = Set<false>;
  using Enable = Set<true>;
};

// Makes the node, checking it against the op table (ops.def: the number of
// inputs, the result's dtype and shape rules); a mismatch is a bug in kiln.
NodePtr make_node(Op op, DType dtype, Shape shape, std::vector<NodePtr> inputs, Attrs attrs = {});

// What ops.def gives an op's node (make_op's helpers): an error naming the
// op when the number of inputs is wrong; the result's dtype and shape from
// the op's DTypeRule and ShapeRule (`given` for ShapeRule Given; an op whose
// dtype is Given has its own builder).
void check_arity(Op op, const std::vector<NodePtr>& inputs);
DType result_dtype(Op op, const std::vector<NodePtr>& inputs);
Shape result_shape(Op op, const std::vector<NodePtr>& inputs, Shape given);

// The generic builder: a node of `op` with attributes `view` (its ir/attrs.h
// view), its dtype and shape from the op table, after the view's operand
// check `View::check(op name, inputs)` where the view has one (the checks the
// table cannot express: dtypes and shapes of the inputs). An op with its own
// kernel needs no builder of its own: ir::make_op(Op::Rope, {x, cos, sin},
// RopeAttrs{}).
template <class View>
NodePtr make_op(Op op, std::vector<NodePtr> inputs, const View& view, Shape given = {}) {
  check_arity(op, inputs);
  if constexpr (requires { View::check(op_name(op), inputs); }) View::check(op_name(op), inputs);
  DType dtype = result_dtype(op, inputs);
  Shape shape = result_shape(op, inputs, std::move(given));
  return make_node(op, dtype, std::move(shape), std::move(inputs), view.attrs());
}
NodePtr data(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype, Device device, std::string name = {});

// generators
NodePtr constant(double value, Shape shape, DType dtype, Device device);
NodePtr iota(int64_t n, double start, double step, DType dtype, Device device);
NodePtr rand_uniform(const NodePtr& key, Shape shape);
NodePtr rand_normal(const NodePtr& key, Shape shape);

// elementwise
DType promote(DType a, DType b);
NodePtr unary(Op op, const NodePtr& x);
NodePtr gelu(const NodePtr& x, bool tanh_form);
NodePtr gelu_grad(const NodePtr& x, const NodePtr& dy, bool tanh_form);
NodePtr cast(const NodePtr& x, DType dtype);
NodePtr detach(const NodePtr& x);
NodePtr binary(Op op, const NodePtr& a, const NodePtr& b);  // broadcasts, promotes
NodePtr where(const NodePtr& cond, const NodePtr& a, const NodePtr& b);

// reductions; axes empty = all axes
NodePtr reduce(Op op, const NodePtr& x, std::vector<int64_t> axes, bool keepdim);
NodePtr argmax(const NodePtr& x, int64_t axis, bool keepdim);
// Sums `x` down to `shape` (the inverse of broadcasting `shape` to x's shape).
NodePtr sum_to(const NodePtr& x, const Shape& shape);

// movement
NodePtr reshape(const NodePtr& x, Shape shape);  // one extent may be -1
NodePtr permute(const NodePtr& x, std::vector<int64_t> perm);
NodePtr transpose(const NodePtr& x, int64_t dim0, int64_t dim1);
NodePtr broadcast_to(const NodePtr& x, const Shape& shape);
NodePtr slice(const NodePtr& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
NodePtr slice_grad(const NodePtr& dy, const Shape& input_shape, int64_t dim, int64_t start,
                   int64_t end, int64_t step);
NodePtr concat(const std::vector<NodePtr>& xs, int64_t dim);
// x's value, ordered after `after` (see Op::Barrier).
NodePtr barrier(const NodePtr& x, const NodePtr& after);

// indexing
NodePtr index_select(const NodePtr& table, const NodePtr& ids, int64_t padding_idx = -1);
NodePtr index_add(const NodePtr& ids, const NodePtr& src, int64_t rows, int64_t padding_idx = -1);
NodePtr gather(const NodePtr& x, int64_t dim, const NodePtr& index);
NodePtr scatter_add(const NodePtr& base, int64_t dim, const NodePtr& index, const NodePtr& src);
NodePtr index_copy(const NodePtr& x, int64_t dim, const NodePtr& index, const NodePtr& src);

// contraction: a [..., M, K] (or [..., K, M] when transpose_a), b [..., K, N]
// (or [..., N, K]); batch dims broadcast; a 1-D operand is not accepted.
NodePtr matmul(const NodePtr& a, const NodePtr& b, bool transpose_a = false, bool transpose_b = false);

// composites
NodePtr softmax(const NodePtr& x, int64_t axis, const NodePtr& mask = nullptr);
NodePtr softmax_grad(const NodePtr& y, const NodePtr& dy, int64_t axis);
NodePtr log_softmax(const NodePtr& x, int64_t axis, const NodePtr& mask = nullptr);
NodePtr log_softmax_grad(const NodePtr& y, const NodePtr& dy, int64_t axis);
NodePtr normalize(const NodePtr& x, double eps);
NodePtr normalize_grad(const NodePtr& x, const NodePtr& dy, double eps);
NodePtr cross_entropy(const NodePtr& logits, const NodePtr& labels, int64_t ignore_index,
                      double label_smoothing);
NodePtr cross_entropy_grad(const NodePtr& logits, const NodePtr& labels, const NodePtr& dloss,
                           int64_t ignore_index, double label_smoothing);
// Fused attention (op.h's Attention): mask (additive, [B or 1,1,1,Tk]) and
// key (the dropout's rng key) may be null; key is required when dropout > 0.
// window > 0 (causal only): a query sees its own key and the window - 1 before it.
// segments (may be null; needs Tq == Tk): i32/i64 [B, Tk] segment ids, equal
// ids one run after another along a row (packed examples); a query sees only
// the keys of its own segment.
NodePtr attention(const NodePtr& q, const NodePtr& k, const NodePtr& v, const NodePtr& mask, const NodePtr& key,
                  bool causal, double scale, double dropout, int64_t window = 0, const NodePtr& segments = nullptr);
// Whether `mask` is a shape attention() takes: [batch or 1, 1, 1, keys].
bool attention_takes_mask(const Shape& mask, int64_t batch, int64_t keys);
// Its gradient: `fwd` an Attention node (its inputs and attrs), out its value.
NodePtr attention_grad(const NodePtr& fwd, const NodePtr& out, const NodePtr& dout);
// The flattened concatenation of `inputs` (f32), summed over the replicas of
// `group` (and across MPI processes), times scale.
NodePtr all_reduce(const std::vector<NodePtr>& inputs, int64_t group, int64_t replica, double scale);
// The flattened concatenation of input k as replica roots[k] (a global rank) holds it.
NodePtr broadcast_from(const std::vector<NodePtr>& inputs, int64_t group, int64_t replica,
                       const std::vector<int64_t>& roots);

}  // namespace kiln::ir
