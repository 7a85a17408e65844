#pragma once
// Op attributes: stored as Attrs (ints and floats: hashed, compared and
// serialised alike for every op) and read and written through one typed
// view per op family. `of` reads a node's Attrs, `attrs()` writes them;
// ir/ops.def names each op's view. A field added to a view is stored after
// the existing ones and written only when it differs from its default, so a
// node without it keeps the Attrs (and the program-cache key) it had.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/core/dtype.h"
#include "kiln/core/error.h"
#include "kiln/core/shape.h"

namespace kiln::ir {

struct Attrs {
  std::vector<int64_t> ints;
  std::vector<double> floats;
  bool operator==(const Attrs&) const = default;
};

namespace attrs_detail {
inline int64_t int_at(const Attrs& a, size_t k, int64_t otherwise = 0) {
  return k < a.ints.size() ? a.ints[k] : otherwise;
}
inline double float_at(const Attrs& a, size_t k, double otherwise = 0.0) {
  return k < a.floats.size() ? a.floats[k] : otherwise;
}
// A view's fields, read from Attrs that must hold at least `ints` and `floats` values.
inline void expect(const Attrs& a, size_t ints, size_t floats, const char* view) {
  KILN_CHECK(a.ints.size() >= ints && a.floats.size() >= floats, view, ": expected at least ", ints, " int and ",
             floats, " float attributes, found ", a.ints.size(), " and ", a.floats.size());
}
}  // namespace attrs_detail

// Data in a flattened Graph: its parameter's index.
struct ParamAttrs {
  int64_t index = 0;
  static ParamAttrs of(const Attrs& a) { return {attrs_detail::int_at(a, 0)}; }
  Attrs attrs() const { return {{index}, {}}; }
};

// Constant: the value of every element.
struct ConstantAttrs {
  double value = 0.0;
  static ConstantAttrs of(const Attrs& a) { return {attrs_detail::float_at(a, 0)}; }
  Attrs attrs() const { return {{}, {value}}; }
};

// Iota: start + i · step.
struct IotaAttrs {
  double start = 0.0, step = 1.0;
  static IotaAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 0, 2, "iota");
    return {a.floats[0], a.floats[1]};
  }
  Attrs attrs() const { return {{}, {start, step}}; }
};

// Gelu, GeluGrad: the erf form (false) or the tanh form.
struct GeluAttrs {
  bool tanh_form = false;
  static GeluAttrs of(const Attrs& a) { return {attrs_detail::int_at(a, 0) == 1}; }
  Attrs attrs() const { return {{tanh_form ? 1 : 0}, {}}; }
};

// Sum, ReduceMax: the reduced axes, one contiguous run [first, last].
// ArgMax: one axis.
struct ReduceAttrs {
  std::vector<int64_t> axes;
  static ReduceAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 1, 0, "reduce");
    return {a.ints};
  }
  int64_t first() const { return axes.front(); }
  int64_t last() const { return axes.back(); }
  Attrs attrs() const { return {axes, {}}; }
};

// Permute: result axis k is input axis perm[k].
struct PermuteAttrs {
  std::vector<int64_t> perm;
  static PermuteAttrs of(const Attrs& a) { return {a.ints}; }
  Attrs attrs() const { return {perm, {}}; }
};

// Slice, SliceGrad: elements start, start + step, ... (< end) of axis dim.
struct SliceAttrs {
  int64_t dim = 0, start = 0, end = 0, step = 1;
  static SliceAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 4, 0, "slice");
    return {a.ints[0], a.ints[1], a.ints[2], a.ints[3]};
  }
  Attrs attrs() const { return {{dim, start, end, step}, {}}; }
};

// Concat, Gather, ScatterAdd, IndexCopy: the axis they work along.
struct DimAttrs {
  int64_t dim = 0;
  static DimAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 1, 0, "dim");
    return {a.ints[0]};
  }
  Attrs attrs() const { return {{dim}, {}}; }
};

// IndexSelect, IndexAdd: the id whose row gets no gradient (-1: none).
struct PaddingAttrs {
  int64_t padding_idx = -1;
  static PaddingAttrs of(const Attrs& a) { return {attrs_detail::int_at(a, 0, -1)}; }
  Attrs attrs() const { return {{padding_idx}, {}}; }
};

// MatMul: whether each operand's last two axes are read transposed.
struct MatMulAttrs {
  bool transpose_a = false, transpose_b = false;
  static MatMulAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 2, 0, "matmul");
    return {a.ints[0] != 0, a.ints[1] != 0};
  }
  Attrs attrs() const { return {{transpose_a, transpose_b}, {}}; }
};

// Softmax, LogSoftmax and their gradients: the axis normalised over.
struct AxisAttrs {
  int64_t axis = -1;
  static AxisAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 1, 0, "axis");
    return {a.ints[0]};
  }
  Attrs attrs() const { return {{axis}, {}}; }
};

// Normalize, NormalizeGrad.
struct NormalizeAttrs {
  double eps = 1e-5;
  static NormalizeAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 0, 1, "normalize");
    return {a.floats[0]};
  }
  Attrs attrs() const { return {{}, {eps}}; }
};

// CrossEntropy, CrossEntropyGrad.
struct CrossEntropyAttrs {
  int64_t ignore_index = -100;
  double smoothing = 0.0;
  static CrossEntropyAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 1, 1, "cross_entropy");
    return {a.ints[0], a.floats[0]};
  }
  Attrs attrs() const { return {{ignore_index}, {smoothing}}; }
};

// Attention, AttentionGrad (see ops.def for the inputs the flags add).
// Stored as ints {causal, has_mask, has_dropout[, kept_probs]} and floats
// {scale, dropout_p[, window]}: the optional fields only when set.
struct AttentionAttrs {
  bool causal = false, has_mask = false, has_dropout = false;
  // Set by the compiler (CompileOptions::attention_probabilities): the
  // forward keeps its probabilities for the gradient to read.
  bool kept_probs = false;
  // Segment ids [B,T] follow the other inputs (packed rows: a query sees
  // only the keys of its own segment).
  bool has_segments = false;
  double scale = 1.0, dropout_p = 0.0;
  int64_t window = 0;  // a causal sliding window's keys per query (0: none)

  static AttentionAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 3, 2, "attention");
    AttentionAttrs r;
    r.causal = a.ints[0] != 0, r.has_mask = a.ints[1] != 0, r.has_dropout = a.ints[2] != 0;
    r.kept_probs = attrs_detail::int_at(a, 3) == 1;
    r.has_segments = attrs_detail::int_at(a, 4) == 1;
    r.scale = a.floats[0], r.dropout_p = a.floats[1];
    r.window = static_cast<int64_t>(attrs_detail::float_at(a, 2));
    return r;
  }
  Attrs attrs() const {
    Attrs a{{causal, has_mask, has_dropout}, {scale, dropout_p}};
    if (kept_probs || has_segments) a.ints.push_back(kept_probs);
    if (has_segments) a.ints.push_back(1);
    if (window > 0) a.floats.push_back(static_cast<double>(window));
    return a;
  }
};

// AllReduce: the replica group, this replica's index in it, and the scale
// the sum is multiplied by.
struct AllReduceAttrs {
  int64_t group = 0, replica = 0;
  double scale = 1.0;
  static AllReduceAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 2, 1, "all_reduce");
    return {a.ints[0], a.ints[1], a.floats[0]};
  }
  Attrs attrs() const { return {{group, replica}, {scale}}; }
};

// BroadcastFrom: group and replica as AllReduce; roots[k] is the global rank
// of the replica whose input k every replica receives.
struct BroadcastFromAttrs {
  int64_t group = 0, replica = 0;
  std::vector<int64_t> roots;
  static BroadcastFromAttrs of(const Attrs& a) {
    attrs_detail::expect(a, 2, 0, "broadcast_from");
    return {a.ints[0], a.ints[1], std::vector<int64_t>(a.ints.begin() + 2, a.ints.end())};
  }
  Attrs attrs() const {
    Attrs a{{group, replica}, {}};
    a.ints.insert(a.ints.end(), roots.begin(), roots.end());
    return a;
  }
};

// Rope: the rotation (false) or its transpose (true), which its gradient takes.
// `check` is ir::make_op's operand check (N: NodePtr).
struct RopeAttrs {
  bool transpose = false;
  static RopeAttrs of(const Attrs& a) { return {attrs_detail::int_at(a, 0) == 1}; }
  Attrs attrs() const { return {{transpose ? 1 : 0}, {}}; }

  // Whether x, cos and sin have shapes the op takes (kiln::rope reshapes the others to fit).
  static bool takes(const Shape& x, const Shape& cos, const Shape& sin) {
    return x.size() == 4 && x[3] > 0 && x[3] % 2 == 0 && cos == sin && cos.size() == 4 &&
           (cos[0] == x[0] || cos[0] == 1) && cos[1] == 1 && cos[2] == x[2] && cos[3] == x[3];
  }
  template <class N>
  static void check(const char* op, const std::vector<N>& in) {
    const N &x = in[0], &cos = in[1], &sin = in[2];
    KILN_CHECK(x->dtype == DType::f32 || x->dtype == DType::bf16, op, ": x must be f32 or bf16, got ",
               dtype_name(x->dtype));
    KILN_CHECK(cos->dtype == DType::f32 && sin->dtype == DType::f32, op, ": cos and sin must be f32, got ",
               dtype_name(cos->dtype), " and ", dtype_name(sin->dtype));
    KILN_CHECK(takes(x->shape, cos->shape, sin->shape), op,
               ": expected x [batch, heads, seq, head_dim] (head_dim even) and cos, sin [batch or 1, 1, seq, "
               "head_dim], got x ",
               to_string(x->shape), ", cos ", to_string(cos->shape), ", sin ", to_string(sin->shape));
  }
};

}  // namespace kiln::ir
