#pragma once
// The primitive operations of kiln's IR. A small set (elementwise, reduce,
// movement, matmul) plus a few composites whose fused kernels beat what the
// compiler builds from primitives (softmax, normalisation, cross-entropy).
//
// Attribute conventions (Attrs::ints / Attrs::floats), per op:
//   Data          ints[0] = parameter index (only in a flattened Graph)
//   Constant      floats[0] = value (every element)
//   Iota          floats = {start, step}; 1-D
//   RandUniform   input: key i64[2] = {seed, offset}; U[0,1) per element
//   RandNormal    input: key; N(0,1) per element
//   Gelu          ints[0] = 0 erf form, 1 tanh form
//   GeluGrad      inputs (x, dy); ints[0] as Gelu
//   Cast          target dtype is the node's dtype
//   Sum/Max/ArgMax  ints = reduced axes (one contiguous run); dims are kept as 1
//   Reshape/Broadcast  target shape is the node's shape
//   Permute       ints = perm
//   Slice         ints = {dim, start, end, step}
//   SliceGrad     ints = {dim, start, end, step}; places input into zeros of node's shape
//   Concat        ints[0] = dim
//   Barrier       inputs (x, after): x's value, not computed before `after` (gradient
//                 checkpointing: a recomputed segment starts once its output's gradient
//                 exists, and is never merged with the original by CSE)
//   IndexSelect   inputs (table, ids): rows of table (axis 0) at ids; ints[0] = padding_idx
//                 (-1: none), whose row gets no gradient (nn.Embedding's padding_idx)
//   IndexAdd      inputs (ids, src): zeros of node's shape, src rows added at ids,
//                 except id ints[0] (padding_idx, -1: none). A third input (made by
//                 the compiler only): a base of the node's shape that each id's sum
//                 of rows is added to, as Add(base, IndexAdd(ids, src)) adds them
//   Gather        inputs (x, index); ints[0] = dim (torch.gather)
//   ScatterAdd    inputs (base, index, src); ints[0] = dim
//   MatMul        ints = {transpose_a, transpose_b}; batch dims broadcast. A third
//                 input (made by the compiler only): a bias [N] added to every row
//   Softmax       inputs (x) or (x, mask); ints[0] = axis; softmax(x + mask)
//   SoftmaxGrad   inputs (y, dy); ints[0] = axis
//   LogSoftmax    inputs (x); ints[0] = axis
//   LogSoftmaxGrad inputs (y, dy); ints[0] = axis
//   Normalize     inputs (x); floats[0] = eps; (x - mean) / sqrt(var + eps) over the last axis
//   NormalizeGrad inputs (x, dy); floats[0] = eps
//   CrossEntropy  inputs (logits [N,C], labels [N]); ints[0] = ignore_index, floats[0] = smoothing; scalar mean
//   CrossEntropyGrad inputs (logits, labels, dloss []); same attrs
//   Attention     inputs (q [B,H,Tq,D], k [B,H,Tk,D], v [B,H,Tk,D]), then the mask
//                 [B or 1,1,1,Tk] f32 if ints[1], then the dropout's rng key if ints[2],
//                 then segment ids i32/i64 [B,Tk] if ints[3] (packed rows, Tq = Tk: a
//                 query sees only keys of its own segment, which lie in one run);
//                 ints = {causal, has_mask, has_dropout, has_segments}, floats = {scale, dropout p} and,
//                 for a sliding window, its size (keys per query; then "key <= query"
//                 below reads "query - window < key <= query"):
//                 dropout(softmax(where(key <= query or not causal, scale·q kᵀ, f32 min)
//                 + mask)) v, f32 [B,H,Tq,D], the dropout drawing what dropout() would
//                 draw on the [B,H,Tq,Tk] probabilities. q, k, v all f32 or all bf16;
//                 bf16: the dropped probabilities enter the product as bf16 too (autocast's
//                 composite), and the gradient's products take bf16 operands
//   AttentionGrad inputs (Attention's inputs, out, dout); Attention's attrs; f32
//                 [numel q + numel k + numel v]: dq, dk, dv flattened one after the other
//   AllReduce     inputs: f32 tensors; result f32 [total elements]: their flattened
//                 concatenation summed over all replicas, times floats[0];
//                 ints = {replica group, replica index} (see distributed/collectives.h)
//   BroadcastFrom inputs: f32 tensors; result f32 [total]: segment k is input k of
//                 the replica whose global rank is ints[2 + k]; ints[0..1] as AllReduce
#include <cstdint>

namespace kiln::ir {

enum class Op : uint8_t {
  // leaves and generators
  Data, Constant, Iota, RandUniform, RandNormal,
  // elementwise unary
  Neg, Exp, Log, Tanh, Erf, Sqrt, Rsqrt, Abs, Sigmoid, Relu, Gelu, Not, Cast, Detach,
  // elementwise binary
  Add, Sub, Mul, Div, Pow, Max, Min, Eq, Ne, Lt, Le, Gt, Ge, And, Or, GeluGrad,
  // elementwise ternary
  Where,
  // reductions
  Sum, ReduceMax, ArgMax,
  // movement
  Reshape, Permute, Broadcast, Slice, SliceGrad, Concat, Barrier,
  // indexing
  IndexSelect, IndexAdd, Gather, ScatterAdd,
  // contraction
  MatMul,
  // composites
  Softmax, SoftmaxGrad, LogSoftmax, LogSoftmaxGrad, Normalize, NormalizeGrad,
  CrossEntropy, CrossEntropyGrad, Attention, AttentionGrad,
  // collectives
  AllReduce, BroadcastFrom,
  kCount
};

enum class OpKind : uint8_t { Leaf, Generator, Elementwise, Reduce, Movement, Other };

const char* op_name(Op op);
OpKind op_kind(Op op);
inline bool is_elementwise(Op op) { return op_kind(op) == OpKind::Elementwise; }
// Views: the result is the input's memory seen with other extents/strides.
inline bool is_movement(Op op) { return op_kind(op) == OpKind::Movement; }

}  // namespace kiln::ir
