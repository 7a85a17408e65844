#include "kiln/ir/builder.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <optional>
#include <string>

#include "kiln/core/error.h"

namespace kiln::ir {

namespace {
thread_local bool g_grad_enabled = true;

uint64_t next_collective_seq() {
  static std::atomic<uint64_t> seq{0};
  return ++seq;
}

bool differentiable(Op op) {
  switch (op) {
    case Op::Data: case Op::Constant: case Op::Iota: case Op::RandUniform: case Op::RandNormal:
    case Op::Not: case Op::Detach: case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le:
    case Op::Gt: case Op::Ge: case Op::And: case Op::Or: case Op::ArgMax:
    case Op::AllReduce:  // applied to gradients, after backward
    case Op::BroadcastFrom:
      return false;
    default:
      return true;
  }
}

void check_float(const NodePtr& x, Op op) {
  KILN_CHECK(x->dtype == DType::f32, op_name(op), ": expected an f32 tensor, got ",
             dtype_name(x->dtype), " ", to_string(x->shape));
}

std::string shapes_str(const NodePtr& a, const NodePtr& b) {
  return to_string(a->shape) + " and " + to_string(b->shape);
}
}  // namespace

bool GradMode::enabled() { return g_grad_enabled; }
void GradMode::set(bool enabled) { g_grad_enabled = enabled; }

namespace {
// The dtype ops.def's rule gives a node of op with these inputs; none for Given.
std::optional<DType> rule_dtype(Op op, const std::vector<NodePtr>& inputs) {
  switch (op_dtype_rule(op)) {
    case DTypeRule::Given: return std::nullopt;
    case DTypeRule::Input0: return inputs[0]->dtype;
    case DTypeRule::Input1: return inputs[1]->dtype;
    case DTypeRule::Bool: return DType::b8;
    case DTypeRule::F32: return DType::f32;
    case DTypeRule::I64: return DType::i64;
  }
  return std::nullopt;
}

// The shape ops.def's rule gives; none for Given.
const Shape* rule_shape(Op op, const std::vector<NodePtr>& inputs) {
  switch (op_shape_rule(op)) {
    case ShapeRule::Given: return nullptr;
    case ShapeRule::Input0: return &inputs[0]->shape;
    case ShapeRule::Input1: return &inputs[1]->shape;
  }
  return nullptr;
}

bool arity_fits(Op op, size_t n) {
  const auto count = static_cast<int>(n);
  return count >= op_min_inputs(op) && (op_max_inputs(op) < 0 || count <= op_max_inputs(op));
}

// The op table's contract (ir/ops.def): how many inputs an op takes and
// what its result's dtype and shape are. A builder that breaks it is a bug in kiln.
void check_op_contract(Op op, DType dtype, const Shape& shape, const std::vector<NodePtr>& inputs) {
  KILN_CHECK(arity_fits(op, inputs.size()), op_name(op), ": internal error: ", inputs.size(), " inputs, the op takes ",
             op_min_inputs(op), " to ", op_max_inputs(op));
  const DType want = rule_dtype(op, inputs).value_or(dtype);
  KILN_CHECK(dtype == want, op_name(op), ": internal error: result dtype ", dtype_name(dtype), ", the op gives ",
             dtype_name(want));
  const Shape* want_shape = rule_shape(op, inputs);
  KILN_CHECK(!want_shape || shape == *want_shape, op_name(op), ": internal error: result shape ", to_string(shape),
             ", the op gives ", to_string(*want_shape));
}
}  // namespace

void check_arity(Op op, const std::vector<NodePtr>& inputs) {
  const int most = op_max_inputs(op);
  KILN_CHECK(arity_fits(op, inputs.size()), op_name(op), ": takes ", op_min_inputs(op),
             most == op_min_inputs(op) ? std::string() : most < 0 ? " or more" : " to " + std::to_string(most),
             " inputs, got ", inputs.size());
  for (const auto& in : inputs) KILN_CHECK(in != nullptr, op_name(op), ": an input is undefined");
}

DType result_dtype(Op op, const std::vector<NodePtr>& inputs) {
  std::optional<DType> t = rule_dtype(op, inputs);
  KILN_CHECK(t.has_value(), op_name(op), ": its result dtype is Given (ops.def); the op needs its own builder");
  return *t;
}

Shape result_shape(Op op, const std::vector<NodePtr>& inputs, Shape given) {
  const Shape* s = rule_shape(op, inputs);
  return s ? *s : given;
}

NodePtr make_node(Op op, DType dtype, Shape shape, std::vector<NodePtr> inputs, Attrs attrs) {
  check_op_contract(op, dtype, shape, inputs);
  auto n = std::make_shared<Node>();
  n->op = op;
  n->dtype = dtype;
  n->shape = std::move(shape);
  n->attrs = std::move(attrs);
  if (!inputs.empty()) {
    n->device = inputs[0]->device;
    for (const auto& in : inputs) {
      KILN_ASSERT(in != nullptr);
      KILN_CHECK(in->device == n->device, op_name(op), ": inputs on different devices (",
                 n->device.str(), " and ", in->device.str(), ")");
    }
  }
  if (GradMode::enabled() && differentiable(op) && is_floating(dtype))
    n->requires_grad = std::any_of(inputs.begin(), inputs.end(),
                                   [](const NodePtr& in) { return in->requires_grad; });
  n->inputs = std::move(inputs);
  return n;
}

NodePtr data(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype, Device device, std::string name) {
  auto n = make_node(Op::Data, dtype, std::move(shape), {});
  n->device = device;
  n->data = std::move(buffer);
  n->name = std::move(name);
  return n;
}

NodePtr constant(double value, Shape shape, DType dtype, Device device) {
  auto n = make_node(Op::Constant, dtype, std::move(shape), {}, ConstantAttrs{value}.attrs());
  n->device = device;
  return n;
}

NodePtr iota(int64_t n, double start, double step, DType dtype, Device device) {
  KILN_CHECK(n >= 0, "arange: negative length ", n);
  auto node = make_node(Op::Iota, dtype, {n}, {}, IotaAttrs{start, step}.attrs());
  node->device = device;
  return node;
}

static NodePtr rand_node(Op op, const NodePtr& key, Shape shape) {
  KILN_CHECK(key->dtype == DType::i64 && (key->shape == Shape{2} || key->shape == Shape{3}), op_name(op),
             ": key must be i64 [2] (seed, offset) or [3] (seed, offset, first element), got ", dtype_name(key->dtype), " ",
             to_string(key->shape));
  return make_node(op, DType::f32, std::move(shape), {key});
}
NodePtr rand_uniform(const NodePtr& key, Shape shape) { return rand_node(Op::RandUniform, key, std::move(shape)); }
NodePtr rand_normal(const NodePtr& key, Shape shape) { return rand_node(Op::RandNormal, key, std::move(shape)); }

// bf16 is a storage type: arithmetic on it is done in f32.
DType promote(DType a, DType b) {
  if (is_floating(a) || is_floating(b)) return DType::f32;
  if (a == DType::i64 || b == DType::i64) return DType::i64;
  if (a == DType::i32 || b == DType::i32) return DType::i32;
  return DType::b8;
}

NodePtr unary(Op op, const NodePtr& x) {
  KILN_CHECK(is_elementwise(op), op_name(op), " is not a unary elementwise op");
  if (op == Op::Not) {
    KILN_CHECK(x->dtype == DType::b8, "not: expected a bool tensor, got ", dtype_name(x->dtype));
    return make_node(op, DType::b8, x->shape, {x});
  }
  if (op == Op::Neg || op == Op::Abs || op == Op::Relu) {
    KILN_CHECK(x->dtype != DType::b8, op_name(op), ": not defined for bool tensors");
    return make_node(op, x->dtype, x->shape, {x});
  }
  check_float(x, op);
  return make_node(op, x->dtype, x->shape, {x});
}

NodePtr gelu(const NodePtr& x, bool tanh_form) {
  check_float(x, Op::Gelu);
  return make_node(Op::Gelu, DType::f32, x->shape, {x}, GeluAttrs{tanh_form}.attrs());
}

NodePtr gelu_grad(const NodePtr& x, const NodePtr& dy, bool tanh_form) {
  KILN_CHECK(x->shape == dy->shape, "gelu_grad: shapes ", shapes_str(x, dy), " differ");
  return make_node(Op::GeluGrad, DType::f32, x->shape, {x, dy}, GeluAttrs{tanh_form}.attrs());
}

NodePtr cast(const NodePtr& x, DType dtype) {
  if (x->dtype == dtype) return x;
  return make_node(Op::Cast, dtype, x->shape, {x});
}

NodePtr detach(const NodePtr& x) {
  auto n = make_node(Op::Detach, x->dtype, x->shape, {x});
  n->requires_grad = false;
  return n;
}

NodePtr binary(Op op, const NodePtr& a, const NodePtr& b) {
  const char* name = op_name(op);
  Shape shape = broadcast_shapes(a->shape, b->shape, name);
  DType t = promote(a->dtype, b->dtype);
  DType out = t;
  switch (op) {
    case Op::Eq: case Op::Ne: case Op::Lt: case Op::Le: case Op::Gt: case Op::Ge:
      out = DType::b8;
      break;
    case Op::And: case Op::Or:
      KILN_CHECK(a->dtype == DType::b8 && b->dtype == DType::b8, name, ": expected bool tensors, got ",
                 dtype_name(a->dtype), " and ", dtype_name(b->dtype));
      break;
    case Op::Pow:
      KILN_CHECK(t == DType::f32, name, ": expected f32 tensors");
      break;
    case Op::GeluGrad:
      KILN_CHECK(false, "gelu_grad: use ir::gelu_grad");
      break;
    default:
      KILN_CHECK(t != DType::b8, name, ": arithmetic on bool tensors; cast them first");
      break;
  }
  NodePtr ca = broadcast_to(cast(a, t), shape);
  NodePtr cb = broadcast_to(cast(b, t), shape);
  return make_node(op, out, shape, {ca, cb});
}

NodePtr where(const NodePtr& cond, const NodePtr& a, const NodePtr& b) {
  KILN_CHECK(cond->dtype == DType::b8, "where: condition must be bool, got ", dtype_name(cond->dtype));
  Shape shape = broadcast_shapes(broadcast_shapes(cond->shape, a->shape, "where"), b->shape, "where");
  DType t = promote(a->dtype, b->dtype);
  return make_node(Op::Where, t, shape,
                   {broadcast_to(cond, shape), broadcast_to(cast(a, t), shape), broadcast_to(cast(b, t), shape)});
}

NodePtr reduce(Op op, const NodePtr& x, std::vector<int64_t> axes, bool keepdim) {
  KILN_CHECK(op == Op::Sum || op == Op::ReduceMax, op_name(op), " is not a reduction");
  const char* name = op_name(op);
  int64_t r = x->rank();
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (auto& a : axes) a = normalize_axis(a, r, name);
  std::sort(axes.begin(), axes.end());
  KILN_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), name, ": repeated axis");
  DType t = x->dtype == DType::b8 ? DType::i64 : x->dtype == DType::bf16 ? DType::f32 : x->dtype;
  NodePtr cur = cast(x, t);
  // One node per contiguous run of axes, last run first; dims are kept as 1.
  size_t i = axes.size();
  while (i > 0) {
    size_t j = i - 1;
    while (j > 0 && axes[j - 1] == axes[j] - 1) --j;
    std::vector<int64_t> run(axes.begin() + j, axes.begin() + i);
    Shape s = cur->shape;
    for (int64_t a : run) s[a] = 1;
    cur = make_node(op, t, s, {cur}, ReduceAttrs{run}.attrs());
    i = j;
  }
  if (!keepdim && !axes.empty()) {
    Shape s;
    for (int64_t d = 0; d < r; ++d)
      if (!std::binary_search(axes.begin(), axes.end(), d)) s.push_back(x->shape[d]);
    cur = reshape(cur, s);
  }
  return cur;
}

NodePtr argmax(const NodePtr& x, int64_t axis, bool keepdim) {
  int64_t a = normalize_axis(axis, x->rank(), "argmax");
  KILN_CHECK(x->dtype != DType::b8, "argmax: not defined for bool tensors");
  Shape s = x->shape;
  s[a] = 1;
  // bf16 values compare as the f32 values they widen to.
  NodePtr n = make_node(Op::ArgMax, DType::i64, s, {cast(x, x->dtype == DType::bf16 ? DType::f32 : x->dtype)},
                        AxisAttrs{a}.attrs());
  if (!keepdim) {
    s.erase(s.begin() + a);
    n = reshape(n, s);
  }
  return n;
}

NodePtr sum_to(const NodePtr& x, const Shape& shape) {
  if (x->shape == shape) return x;
  int64_t lead = x->rank() - static_cast<int64_t>(shape.size());
  KILN_CHECK(lead >= 0, "sum_to: cannot reduce ", to_string(x->shape), " to ", to_string(shape));
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < x->rank(); ++i) {
    if (i < lead) axes.push_back(i);
    else if (shape[i - lead] == 1 && x->shape[i] != 1) axes.push_back(i);
    else KILN_CHECK(shape[i - lead] == x->shape[i], "sum_to: cannot reduce ", to_string(x->shape),
                    " to ", to_string(shape));
  }
  NodePtr s = axes.empty() ? x : reduce(Op::Sum, x, axes, true);
  return reshape(s, shape);
}

NodePtr reshape(const NodePtr& x, Shape shape) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      KILN_CHECK(infer < 0, "reshape: more than one -1 in ", to_string(shape));
      infer = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(shape[i] >= 0, "reshape: negative extent in ", to_string(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known > 0 && x->numel() % known == 0, "reshape: cannot reshape ", to_string(x->shape),
               " to ", to_string(shape));
    shape[infer] = x->numel() / known;
  }
  KILN_CHECK(numel(shape) == x->numel(), "reshape: cannot reshape ", to_string(x->shape), " (",
             x->numel(), " elements) to ", to_string(shape), " (", numel(shape), " elements)");
  if (shape == x->shape) return x;
  return make_node(Op::Reshape, x->dtype, std::move(shape), {x});
}

NodePtr permute(const NodePtr& x, std::vector<int64_t> perm) {
  int64_t r = x->rank();
  KILN_CHECK(static_cast<int64_t>(perm.size()) == r, "permute: perm has ", perm.size(),
             " entries for a tensor of shape ", to_string(x->shape));
  std::vector<bool> seen(r, false);
  Shape s(r);
  bool identity = true;
  for (int64_t i = 0; i < r; ++i) {
    perm[i] = normalize_axis(perm[i], r, "permute");
    KILN_CHECK(!seen[perm[i]], "permute: axis ", perm[i], " repeated");
    seen[perm[i]] = true;
    s[i] = x->shape[perm[i]];
    identity = identity && perm[i] == i;
  }
  if (identity) return x;
  return make_node(Op::Permute, x->dtype, s, {x}, PermuteAttrs{perm}.attrs());
}

NodePtr transpose(const NodePtr& x, int64_t dim0, int64_t dim1) {
  int64_t r = x->rank();
  std::vector<int64_t> perm(r);
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[normalize_axis(dim0, r, "transpose")], perm[normalize_axis(dim1, r, "transpose")]);
  return permute(x, perm);
}

NodePtr broadcast_to(const NodePtr& x, const Shape& shape) {
  if (x->shape == shape) return x;
  Shape b = broadcast_shapes(x->shape, shape, "broadcast_to");
  KILN_CHECK(b == shape, "broadcast_to: cannot broadcast ", to_string(x->shape), " to ", to_string(shape));
  return make_node(Op::Broadcast, x->dtype, shape, {x});
}

NodePtr slice(const NodePtr& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int64_t d = normalize_axis(dim, x->rank(), "slice");
  int64_t n = x->shape[d];
  KILN_CHECK(step >= 1, "slice: step must be >= 1, got ", step);
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  if (start == 0 && end == n && step == 1) return x;
  Shape s = x->shape;
  s[d] = (end - start + step - 1) / step;
  return make_node(Op::Slice, x->dtype, s, {x}, SliceAttrs{d, start, end, step}.attrs());
}

NodePtr slice_grad(const NodePtr& dy, const Shape& input_shape, int64_t dim, int64_t start,
                   int64_t end, int64_t step) {
  return make_node(Op::SliceGrad, dy->dtype, input_shape, {dy}, SliceAttrs{dim, start, end, step}.attrs());
}

NodePtr concat(const std::vector<NodePtr>& xs, int64_t dim) {
  KILN_CHECK(!xs.empty(), "concat: no inputs");
  if (xs.size() == 1) return xs[0];
  int64_t d = normalize_axis(dim, xs[0]->rank(), "concat");
  Shape s = xs[0]->shape;
  s[d] = 0;
  for (const auto& x : xs) {
    KILN_CHECK(x->rank() == xs[0]->rank() && x->dtype == xs[0]->dtype, "concat: inputs ",
               to_string(xs[0]->shape), " ", dtype_name(xs[0]->dtype), " and ", to_string(x->shape), " ",
               dtype_name(x->dtype), " differ in rank or dtype");
    for (int64_t i = 0; i < x->rank(); ++i)
      KILN_CHECK(i == d || x->shape[i] == xs[0]->shape[i], "concat: shapes ", to_string(xs[0]->shape),
                 " and ", to_string(x->shape), " differ outside dim ", d);
    s[d] += x->shape[d];
  }
  return make_node(Op::Concat, xs[0]->dtype, s, xs, DimAttrs{d}.attrs());
}

NodePtr barrier(const NodePtr& x, const NodePtr& after) {
  auto n = make_node(Op::Barrier, x->dtype, x->shape, {x, after});
  n->requires_grad = GradMode::enabled() && x->requires_grad;
  return n;
}

NodePtr index_select(const NodePtr& table, const NodePtr& ids, int64_t padding_idx) {
  KILN_CHECK(is_integral(ids->dtype), "index_select: ids must be i32/i64, got ", dtype_name(ids->dtype));
  KILN_CHECK(table->rank() >= 1, "index_select: table must have rank >= 1");
  Shape s = ids->shape;
  s.insert(s.end(), table->shape.begin() + 1, table->shape.end());
  return make_node(Op::IndexSelect, table->dtype, s, {table, ids}, PaddingAttrs{padding_idx}.attrs());
}

// The row kernels (index_add, gather, scatter_add) work on f32: bf16 values
// go through f32 (exact) and the result is rounded back.
NodePtr index_add(const NodePtr& ids, const NodePtr& src, int64_t rows, int64_t padding_idx) {
  if (src->dtype == DType::bf16) return cast(index_add(ids, cast(src, DType::f32), rows, padding_idx), DType::bf16);
  Shape s{rows};
  s.insert(s.end(), src->shape.begin() + ids->rank(), src->shape.end());
  return make_node(Op::IndexAdd, src->dtype, s, {ids, src}, PaddingAttrs{padding_idx}.attrs());
}

NodePtr gather(const NodePtr& x, int64_t dim, const NodePtr& index) {
  if (x->dtype == DType::bf16) return cast(gather(cast(x, DType::f32), dim, index), DType::bf16);
  int64_t d = normalize_axis(dim, x->rank(), "gather");
  KILN_CHECK(is_integral(index->dtype), "gather: index must be i32/i64, got ", dtype_name(index->dtype));
  KILN_CHECK(index->rank() == x->rank(), "gather: index ", to_string(index->shape), " and input ",
             to_string(x->shape), " differ in rank");
  for (int64_t i = 0; i < x->rank(); ++i)
    KILN_CHECK(i == d || index->shape[i] <= x->shape[i], "gather: index ", to_string(index->shape),
               " larger than input ", to_string(x->shape), " at dim ", i);
  return make_node(Op::Gather, x->dtype, index->shape, {x, index}, DimAttrs{d}.attrs());
}

NodePtr scatter_add(const NodePtr& base, int64_t dim, const NodePtr& index, const NodePtr& src) {
  if (base->dtype == DType::bf16 && src->dtype == DType::bf16)
    return cast(scatter_add(cast(base, DType::f32), dim, index, cast(src, DType::f32)), DType::bf16);
  int64_t d = normalize_axis(dim, base->rank(), "scatter_add");
  KILN_CHECK(is_integral(index->dtype), "scatter_add: index must be i32/i64");
  KILN_CHECK(index->shape == src->shape, "scatter_add: index ", to_string(index->shape), " and src ",
             to_string(src->shape), " differ");
  KILN_CHECK(src->rank() == base->rank() && src->dtype == base->dtype, "scatter_add: src ",
             to_string(src->shape), " and base ", to_string(base->shape), " differ in rank or dtype");
  return make_node(Op::ScatterAdd, base->dtype, base->shape, {base, index, src}, DimAttrs{d}.attrs());
}

// A copy of bytes: any dtype, src in x's.
NodePtr index_copy(const NodePtr& x, int64_t dim, const NodePtr& index, const NodePtr& src) {
  int64_t d = normalize_axis(dim, x->rank(), "index_copy");
  KILN_CHECK(is_integral(index->dtype) && index->rank() == 1, "index_copy: index must be a 1-D i32/i64 tensor, got ",
             dtype_name(index->dtype), to_string(index->shape));
  Shape expected = x->shape;
  expected[d] = index->shape[0];
  KILN_CHECK(src->shape == expected && src->dtype == x->dtype, "index_copy: src ", dtype_name(src->dtype),
             to_string(src->shape), " must be ", dtype_name(x->dtype), to_string(expected), " (x ",
             to_string(x->shape), " with dim ", d, " as long as index)");
  return make_node(Op::IndexCopy, x->dtype, x->shape, {x, index, src}, DimAttrs{d}.attrs());
}

NodePtr matmul(const NodePtr& a, const NodePtr& b, bool transpose_a, bool transpose_b) {
  KILN_CHECK(a->rank() >= 2 && b->rank() >= 2, "matmul: operands must have rank >= 2, got ",
             shapes_str(a, b));
  // bf16 operands: exact products, sums and result in f32 (--bf16).
  KILN_CHECK(a->dtype == b->dtype && is_floating(a->dtype), "matmul: expected two f32 or two bf16 operands, got ",
             dtype_name(a->dtype), " and ", dtype_name(b->dtype));
  int64_t ra = a->rank(), rb = b->rank();
  int64_t M = transpose_a ? a->shape[ra - 1] : a->shape[ra - 2];
  int64_t Ka = transpose_a ? a->shape[ra - 2] : a->shape[ra - 1];
  int64_t Kb = transpose_b ? b->shape[rb - 1] : b->shape[rb - 2];
  int64_t N = transpose_b ? b->shape[rb - 2] : b->shape[rb - 1];
  KILN_CHECK(Ka == Kb, "matmul: inner dimensions differ: ", to_string(a->shape),
             transpose_a ? "ᵀ" : "", " x ", to_string(b->shape), transpose_b ? "ᵀ" : "", " (", Ka,
             " vs ", Kb, ")");
  Shape ba(a->shape.begin(), a->shape.end() - 2), bb(b->shape.begin(), b->shape.end() - 2);
  Shape s = broadcast_shapes(ba, bb, "matmul");
  s.push_back(M);
  s.push_back(N);
  return make_node(Op::MatMul, DType::f32, s, {a, b}, MatMulAttrs{transpose_a, transpose_b}.attrs());
}

static NodePtr softmax_like(Op op, const NodePtr& x, int64_t axis, const NodePtr& mask) {
  check_float(x, op);
  int64_t a = normalize_axis(axis, x->rank(), op_name(op));
  if (!mask) return make_node(op, DType::f32, x->shape, {x}, AxisAttrs{a}.attrs());
  check_float(mask, op);
  Shape b = broadcast_shapes(x->shape, mask->shape, op_name(op));
  KILN_CHECK(b == x->shape, op_name(op), ": mask ", to_string(mask->shape), " does not broadcast to input ",
             to_string(x->shape));
  return make_node(op, DType::f32, x->shape, {x, broadcast_to(mask, x->shape)}, AxisAttrs{a}.attrs());
}

NodePtr softmax(const NodePtr& x, int64_t axis, const NodePtr& mask) { return softmax_like(Op::Softmax, x, axis, mask); }

NodePtr softmax_grad(const NodePtr& y, const NodePtr& dy, int64_t axis) {
  return make_node(Op::SoftmaxGrad, DType::f32, y->shape, {y, dy}, AxisAttrs{axis}.attrs());
}

NodePtr log_softmax(const NodePtr& x, int64_t axis, const NodePtr& mask) {
  return softmax_like(Op::LogSoftmax, x, axis, mask);
}

NodePtr log_softmax_grad(const NodePtr& y, const NodePtr& dy, int64_t axis) {
  return make_node(Op::LogSoftmaxGrad, DType::f32, y->shape, {y, dy}, AxisAttrs{axis}.attrs());
}

NodePtr normalize(const NodePtr& x, double eps) {
  check_float(x, Op::Normalize);
  KILN_CHECK(x->rank() >= 1, "layer_norm: input must have rank >= 1");
  return make_node(Op::Normalize, DType::f32, x->shape, {x}, NormalizeAttrs{eps}.attrs());
}

NodePtr normalize_grad(const NodePtr& x, const NodePtr& dy, double eps) {
  return make_node(Op::NormalizeGrad, DType::f32, x->shape, {x, dy}, NormalizeAttrs{eps}.attrs());
}

NodePtr cross_entropy(const NodePtr& logits, const NodePtr& labels, int64_t ignore_index,
                      double label_smoothing) {
  KILN_CHECK(is_floating(logits->dtype), "cross_entropy: logits must be f32 or bf16, got ", dtype_name(logits->dtype));
  KILN_CHECK(is_integral(labels->dtype), "cross_entropy: labels must be i32/i64, got ",
             dtype_name(labels->dtype));
  KILN_CHECK(logits->rank() >= 1, "cross_entropy: logits must have rank >= 1");
  Shape lead(logits->shape.begin(), logits->shape.end() - 1);
  KILN_CHECK(labels->shape == lead, "cross_entropy: logits ", to_string(logits->shape),
             " expect labels of shape ", to_string(lead), ", got ", to_string(labels->shape));
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  int64_t C = logits->shape.back();
  NodePtr l2 = reshape(logits, {-1, C});
  NodePtr y1 = reshape(labels, {-1});
  return make_node(Op::CrossEntropy, DType::f32, {}, {l2, y1}, CrossEntropyAttrs{ignore_index, label_smoothing}.attrs());
}

NodePtr cross_entropy_grad(const NodePtr& logits, const NodePtr& labels, const NodePtr& dloss,
                           int64_t ignore_index, double label_smoothing) {
  return make_node(Op::CrossEntropyGrad, logits->dtype, logits->shape, {logits, labels, dloss},
                   CrossEntropyAttrs{ignore_index, label_smoothing}.attrs());
}

bool attention_takes_mask(const Shape& m, int64_t batch, int64_t keys) {
  return m.size() == 4 && (m[0] == batch || m[0] == 1) && m[1] == 1 && m[2] == 1 && m[3] == keys;
}

NodePtr attention(const NodePtr& q, const NodePtr& k, const NodePtr& v, const NodePtr& mask, const NodePtr& key,
                  bool causal, double scale, double dropout, int64_t window, const NodePtr& segments) {
  for (const NodePtr* x : {&q, &k, &v})
    KILN_CHECK((*x)->rank() == 4, "attention: q, k and v must be [batch, heads, seq, head_dim], got ",
               to_string((*x)->shape));
  KILN_CHECK(q->dtype == k->dtype && k->dtype == v->dtype && (q->dtype == DType::f32 || q->dtype == DType::bf16),
             "attention: q, k and v must be all f32 or all bf16, got ", dtype_name(q->dtype), ", ",
             dtype_name(k->dtype), ", ", dtype_name(v->dtype));
  const int64_t B = q->shape[0], H = q->shape[1], Tq = q->shape[2], D = q->shape[3], Tk = k->shape[2];
  KILN_CHECK(k->shape == (Shape{B, H, Tk, D}) && v->shape == k->shape, "attention: q ", to_string(q->shape),
             " expects k and v of shape ", to_string(Shape{B, H, Tk, D}), ", got k ", to_string(k->shape), " and v ",
             to_string(v->shape));
  KILN_CHECK(!causal || Tq == Tk, "attention: causal attention needs as many queries as keys, got ", Tq, " and ", Tk);
  KILN_CHECK(dropout >= 0.0 && dropout < 1.0, "attention: dropout must be in [0, 1), got ", dropout);
  KILN_CHECK(window >= 0 && (window == 0 || causal), "attention: a sliding window (", window,
             ") needs causal attention and a positive size");
  std::vector<NodePtr> inputs{q, k, v};
  if (mask) {
    check_float(mask, Op::Attention);
    KILN_CHECK(attention_takes_mask(mask->shape, B, Tk), "attention: mask must be [", B, " or 1,1,1,", Tk,
               "], got ", to_string(mask->shape));
    inputs.push_back(mask);
  }
  if (dropout > 0.0) {
    KILN_CHECK(key && key->dtype == DType::i64 && key->shape == Shape{3},
               "attention: dropout needs an i64 [3] rng key (Generator::next_key)");
    inputs.push_back(key);
  }
  if (segments) {
    KILN_CHECK(Tq == Tk && segments->shape == (Shape{B, Tk}) &&
                   (segments->dtype == DType::i32 || segments->dtype == DType::i64),
               "attention: segment ids must be i32 or i64 [", B, ",", Tk, "] with as many queries as keys (",
               Tq, "), got ", dtype_name(segments->dtype), " ", to_string(segments->shape));
    KILN_CHECK(!segments->requires_grad, "attention: segment ids take no gradient");
    inputs.push_back(segments);
  }
  AttentionAttrs a;
  a.causal = causal, a.has_mask = mask != nullptr, a.has_dropout = dropout > 0.0;
  a.has_segments = segments != nullptr;
  a.scale = scale, a.dropout_p = dropout, a.window = window;
  return make_node(Op::Attention, DType::f32, q->shape, std::move(inputs), a.attrs());
}

NodePtr attention_grad(const NodePtr& fwd, const NodePtr& out, const NodePtr& dout) {
  KILN_ASSERT(fwd->op == Op::Attention);
  KILN_CHECK(dout->shape == fwd->shape && dout->dtype == DType::f32, "attention: the output gradient must be f32 ",
             to_string(fwd->shape), ", got ", dtype_name(dout->dtype), " ", to_string(dout->shape));
  std::vector<NodePtr> inputs = fwd->inputs;
  inputs.push_back(out);
  inputs.push_back(dout);
  const int64_t n = numel(fwd->inputs[0]->shape) + numel(fwd->inputs[1]->shape) + numel(fwd->inputs[2]->shape);
  return make_node(Op::AttentionGrad, DType::f32, {n}, std::move(inputs), fwd->attrs);
}

NodePtr all_reduce(const std::vector<NodePtr>& inputs, int64_t group, int64_t replica, double scale) {
  KILN_CHECK(!inputs.empty(), "all_reduce: no tensors to reduce");
  int64_t total = 0;
  Device device = inputs[0]->device;
  for (const auto& x : inputs) {
    KILN_CHECK(x->dtype == DType::f32, "all_reduce: tensors must be f32, got ", dtype_name(x->dtype));
    KILN_CHECK(x->device == device, "all_reduce: tensors on ", device.str(), " and ", x->device.str());
    total += x->numel();
  }
  auto n = make_node(Op::AllReduce, DType::f32, {total}, inputs, AllReduceAttrs{group, replica, scale}.attrs());
  n->seq = next_collective_seq();
  return n;
}

NodePtr broadcast_from(const std::vector<NodePtr>& inputs, int64_t group, int64_t replica,
                       const std::vector<int64_t>& roots) {
  KILN_CHECK(!inputs.empty() && roots.size() == inputs.size(), "broadcast_from: ", inputs.size(), " tensors and ",
             roots.size(), " roots");
  int64_t total = 0;
  for (const auto& x : inputs) {
    KILN_CHECK(x->dtype == DType::f32, "broadcast_from: tensors must be f32, got ", dtype_name(x->dtype));
    total += x->numel();
  }
  auto n = make_node(Op::BroadcastFrom, DType::f32, {total}, inputs, BroadcastFromAttrs{group, replica, roots}.attrs());
  n->seq = next_collective_seq();
  return n;
}

}  // namespace kiln::ir
