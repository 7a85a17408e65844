// The op table (ir/ops.def) and the attribute views (ir/attrs.h).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/backend/elementwise.h"
#include "kiln/ir/attrs.h"
#include "kiln/ir/builder.h"
#include "kiln/ir/op.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using ir::Op;

TEST(OpTable, NamesAreUniqueAndKindsAgreeWithTheFusedForms) {
  std::set<std::string> names;
  for (int k = 0; k < static_cast<int>(Op::kCount); ++k) {
    const auto op = static_cast<Op>(k);
    const std::string name = ir::op_name(op);
    EXPECT_FALSE(name.empty());
    EXPECT_TRUE(names.insert(name).second) << name << " is listed twice";
    // Every elementwise op has a formula, and only elementwise ops have one.
    EXPECT_EQ(ir::is_elementwise(op), backend::elementwise::has_formula(op)) << name;
    if (ir::is_elementwise(op)) {
      EXPECT_EQ(ir::op_min_inputs(op), ir::op_max_inputs(op)) << name;
      EXPECT_TRUE(ir::fuses(op)) << name;
    }
    const int max = ir::op_max_inputs(op);
    EXPECT_TRUE(max < 0 || max >= ir::op_min_inputs(op)) << name;
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(Op::kCount));
  EXPECT_STREQ(ir::op_name(Op::GeluGrad), "gelu_grad");
  EXPECT_EQ(ir::op_kind(Op::Slice), ir::OpKind::Movement);
  EXPECT_EQ(ir::op_fused_form(Op::Pow), ir::FusedForm::Formula);
  EXPECT_FALSE(ir::fuses(Op::MatMul));
}

TEST(OpTable, FormulasGiveTheOpsValues) {
  namespace ew = backend::elementwise;
  double r = 0.0;
  EXPECT_TRUE(ew::apply_op(Op::Sub, ew::kF32, 0, 5.0, 3.0, 0.0, r));
  EXPECT_EQ(r, 2.0);
  EXPECT_TRUE(ew::apply_op(Op::Div, ew::kI64, 0, -7.0, 2.0, 0.0, r));
  EXPECT_EQ(r, -3.0);  // integer division truncates
  EXPECT_TRUE(ew::apply_op(Op::Where, ew::kF32, 0, 0.0, 1.0, 2.0, r));
  EXPECT_EQ(r, 2.0);
  EXPECT_EQ(ew::formula<Op::Relu>(ew::kF32, 0, -1.5f, 0.0f, 0.0f), 0.0f);
  EXPECT_FALSE(ew::apply_op(Op::MatMul, ew::kF32, 0, 1.0, 1.0, 1.0, r));
  EXPECT_FALSE(ew::apply_op(Op::Constant, ew::kF32, 0, 1.0, 1.0, 1.0, r));
}

TEST(AttrViews, AttentionRoundTripsAndStoresOptionalFieldsOnlyWhenSet) {
  ir::AttentionAttrs a;
  a.causal = true, a.has_mask = true, a.scale = 0.125, a.dropout_p = 0.1, a.has_dropout = true;
  const ir::Attrs plain = a.attrs();
  EXPECT_EQ(plain.ints, (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(plain.floats, (std::vector<double>{0.125, 0.1}));
  a.window = 4, a.kept_probs = true;
  const ir::Attrs full = a.attrs();
  EXPECT_EQ(full.ints, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(full.floats, (std::vector<double>{0.125, 0.1, 4.0}));
  const auto back = ir::AttentionAttrs::of(full);
  EXPECT_TRUE(back.causal && back.has_mask && back.has_dropout && back.kept_probs);
  EXPECT_EQ(back.window, 4);
  EXPECT_EQ(back.scale, 0.125);
  EXPECT_FALSE(ir::AttentionAttrs::of(plain).kept_probs);
}

TEST(AttrViews, ReadTheBuildersAttributes) {
  auto x = ir::constant(1.0, {2, 6}, DType::f32, Device::cpu());
  auto s = ir::slice(x, 1, 1, 5, 2);
  const auto sl = ir::SliceAttrs::of(s->attrs);
  EXPECT_EQ(sl.dim, 1);
  EXPECT_EQ(sl.start, 1);
  EXPECT_EQ(sl.end, 5);
  EXPECT_EQ(sl.step, 2);
  EXPECT_EQ(ir::ConstantAttrs::of(x->attrs).value, 1.0);
  EXPECT_TRUE(ir::GeluAttrs::of(ir::gelu(x, true)->attrs).tanh_form);
  EXPECT_FALSE(ir::GeluAttrs::of(ir::gelu(x, false)->attrs).tanh_form);
  const auto b = ir::BroadcastFromAttrs{3, 1, {0, 2}}.attrs();
  EXPECT_EQ(b.ints, (std::vector<int64_t>{3, 1, 0, 2}));
  EXPECT_EQ(ir::BroadcastFromAttrs::of(b).roots, (std::vector<int64_t>{0, 2}));
}

TEST(AttrViews, MissingAttributesNameTheView) {
  EXPECT_CONTAINS(testing::error_of([] { ir::AttentionAttrs::of(ir::Attrs{{1}, {}}); }), "attention");
  EXPECT_CONTAINS(testing::error_of([] { ir::SliceAttrs::of(ir::Attrs{{0, 1}, {}}); }), "slice");
}

TEST(OpTable, BuildersKeepTheTablesContract) {
  auto x = ir::constant(1.0, {2}, DType::f32, Device::cpu());
  // An input count outside the op's range, or a dtype against its rule.
  EXPECT_CONTAINS(testing::error_of([&] { ir::make_node(Op::Add, DType::f32, {2}, {x}); }), "add");
  EXPECT_CONTAINS(testing::error_of([&] { ir::make_node(Op::Eq, DType::f32, {2}, {x, x}); }), "eq");
  EXPECT_NO_THROW(ir::make_node(Op::Eq, DType::b8, {2}, {x, x}));
}

TEST(OpTable, MakeNodeChecksTheShapeRule) {
  auto x = ir::constant(1.0, {2}, DType::f32, Device::cpu());
  // Neg's result has its input's shape (ShapeRule Input0).
  EXPECT_CONTAINS(testing::error_of([&] { ir::make_node(Op::Neg, DType::f32, {3}, {x}); }), "result shape [3]");
  EXPECT_EQ(ir::op_shape_rule(Op::Gather), ir::ShapeRule::Input1);
  EXPECT_EQ(ir::op_shape_rule(Op::MatMul), ir::ShapeRule::Given);
}

// The generic builder takes an op's dtype and shape from the table and runs
// its view's operand check; Rope is built by it alone.
TEST(OpTable, MakeOpBuildsRopeAndRejectsBadOperands) {
  auto t = [](Shape s, DType d = DType::f32) { return ir::constant(0.5, std::move(s), d, Device::cpu()); };
  const auto y =
      ir::make_op(Op::Rope, {t({2, 3, 5, 8}, DType::bf16), t({1, 1, 5, 8}), t({1, 1, 5, 8})}, ir::RopeAttrs{});
  EXPECT_EQ(y->shape, (Shape{2, 3, 5, 8}));
  EXPECT_EQ(y->dtype, DType::f32);
  EXPECT_FALSE(ir::RopeAttrs::of(y->attrs).transpose);
  EXPECT_TRUE(ir::RopeAttrs::of(ir::RopeAttrs{true}.attrs()).transpose);
  auto error = [&](Shape x, Shape cos, Shape sin, DType xd = DType::f32, DType cd = DType::f32) {
    return testing::error_of([&] {
      ir::make_op(Op::Rope, {t(std::move(x), xd), t(std::move(cos), cd), t(std::move(sin))}, ir::RopeAttrs{});
    });
  };
  EXPECT_CONTAINS(error({2, 3, 5, 7}, {1, 1, 5, 7}, {1, 1, 5, 7}), "rope: expected x [batch, heads, seq, head_dim]");
  EXPECT_CONTAINS(error({2, 3, 5, 8}, {1, 1, 4, 8}, {1, 1, 4, 8}), "cos [1,1,4,8]");
  EXPECT_CONTAINS(error({2, 3, 5, 8}, {3, 1, 5, 8}, {3, 1, 5, 8}), "x [2,3,5,8]");
  EXPECT_CONTAINS(error({2, 3, 5, 8}, {1, 1, 5, 8}, {1, 5, 8}), "sin [1,5,8]");
  EXPECT_CONTAINS(error({3, 5, 8}, {1, 5, 8}, {1, 5, 8}), "got x [3,5,8]");
  EXPECT_CONTAINS(error({2, 3, 5, 8}, {1, 1, 5, 8}, {1, 1, 5, 8}, DType::i64), "rope: x must be f32 or bf16, got i64");
  EXPECT_CONTAINS(error({2, 3, 5, 8}, {1, 1, 5, 8}, {1, 1, 5, 8}, DType::f32, DType::bf16),
                  "cos and sin must be f32, got bf16 and f32");
  auto x = t({2, 3, 5, 8});
  EXPECT_CONTAINS(testing::error_of([&] { ir::make_op(Op::Rope, {x, x}, ir::RopeAttrs{}); }),
                  "rope: takes 3 inputs, got 2");
}

}  // namespace
}  // namespace kiln
