#pragma once
// The primitive operations of kiln's IR. A small set (elementwise, reduce,
// movement, matmul) plus a few composites whose fused kernels beat what the
// compiler builds from primitives (softmax, normalisation, cross-entropy).
// Each op is one line of ir/ops.def (its name, kind, inputs, dtype rule,
// how fused programs evaluate it, and what its inputs and attributes mean);
// everything here is derived from that table. Attributes are read and
// written through the typed views of ir/attrs.h.
//
// NVRTC compiles this header (with backend/elementwise.h) for the fused
// CUDA kernels: no standard library beyond <cstdint>.
#include <cstdint>

#include "kiln/core/hd.h"

namespace kiln::ir {

enum class Op : uint8_t {
#define KILN_OP(Name, ...) Name,
#include "kiln/ir/ops.def"
  kCount
};

enum class OpKind : uint8_t { Leaf, Generator, Elementwise, Reduce, Movement, Other };

// The result's dtype (ops.def): the node's own (a cast's target, a literal's),
// one input's, or fixed.
enum class DTypeRule : uint8_t { Given, Input0, Input1, Bool, F32, I64 };

// The result's shape (ops.def): computed by the op's builder, or one input's.
enum class ShapeRule : uint8_t { Given, Input0, Input1 };

// How a fused elementwise program evaluates an op (ops.def's Fused column).
enum class FusedForm : uint8_t {
  No,       // not in fused programs
  Load,     // Data and Constant: loaded (every backend, the CPU JIT too)
  Draw,     // a random draw: the interpreters and the CUDA code generator
  Formula,  // backend/elementwise.h's formula: the interpreters and the CUDA code generator
  Inline,   // the formula, and the CPU JIT emits it as instructions
  Call,     // the formula, and a float lane form (elementwise.h's lanes) the CPU interpreter and JIT call
};

const char* op_name(Op op);

KILN_HD constexpr OpKind op_kind(Op op) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, ShapeRule_, Fused) case Op::Name: return OpKind::Kind;
#include "kiln/ir/ops.def"
    default: return OpKind{};
  }
}
KILN_HD constexpr int op_min_inputs(Op op) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, ShapeRule_, Fused) case Op::Name: return min_inputs;
#include "kiln/ir/ops.def"
    default: return int{};
  }
}
// -1: any number from op_min_inputs.
KILN_HD constexpr int op_max_inputs(Op op) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, ShapeRule_, Fused) case Op::Name: return max_inputs;
#include "kiln/ir/ops.def"
    default: return int{};
  }
}
KILN_HD constexpr DTypeRule op_dtype_rule(Op op) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, ShapeRule_, Fused) case Op::Name: return DTypeRule::Rule;
#include "kiln/ir/ops.def"
    default: return DTypeRule{};
  }
}
KILN_HD constexpr ShapeRule op_shape_rule(Op op) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, ShapeRule_, Fused) case Op::Name: return ShapeRule::ShapeRule_;
#include "kiln/ir/ops.def"
    default: return ShapeRule{};
  }
}
KILN_HD constexpr FusedForm op_fused_form(Op op) {
  switch (op) {
#define KILN_OP(Name, name, Kind, min_inputs, max_inputs, Rule, ShapeRule_, Fused) case Op::Name: return FusedForm::Fused;
#include "kiln/ir/ops.def"
    default: return FusedForm{};
  }
}

KILN_HD constexpr bool is_elementwise(Op op) { return op_kind(op) == OpKind::Elementwise; }
// Views: the result is the input's memory seen with other extents/strides.
KILN_HD constexpr bool is_movement(Op op) { return op_kind(op) == OpKind::Movement; }
// Whether a fused elementwise program may hold a step of op.
KILN_HD constexpr bool fuses(Op op) { return op_fused_form(op) != FusedForm::No; }

}  // namespace kiln::ir
