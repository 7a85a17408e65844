// rematerialize_parameter_casts (compiler/remat_casts.cpp): under Autocast a
// weight's bf16 copy read by its forward product and, far later, by the
// backward's input-gradient product is made again right before the late
// reader; copies whose readers are close together stay one.
#include <algorithm>
#include <map>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/passes.h"
#include "kiln/runtime/autocast.h"
#include "support/test_util.h"

namespace kiln {
namespace {

// Casts of parameters to bf16 in g, by parameter node.
std::map<int32_t, std::vector<int32_t>> parameter_casts(const ir::Graph& g) {
  std::map<int32_t, std::vector<int32_t>> casts;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::GraphNode& n = g.nodes[i];
    if (n.op == ir::Op::Cast && n.dtype == DType::bf16 && g.nodes[n.inputs[0]].op == ir::Op::Data)
      casts[n.inputs[0]].push_back(static_cast<int32_t>(i));
  }
  return casts;
}

TEST(RematCasts, ABf16WeightCopyIsMadeAgainForTheBackwardsProduct) {
  constexpr int kLayers = 60;
  std::vector<Tensor> ws;
  Tensor loss;
  {
    Autocast autocast(true);
    Tensor h = Tensor::from_vector(testing::uniform_values(4 * 16, 1), {4, 16});
    for (int l = 0; l < kLayers; ++l) {
      ws.push_back(Tensor::from_vector(testing::uniform_values(16 * 16, 10 + l, -0.6f, 0.6f), {16, 16}).requires_grad_());
      h = gelu(linear(h, ws.back()));
    }
    loss = sum(h * h);
    loss.backward();
  }
  std::vector<ir::NodePtr> outs{loss.node()};
  for (const Tensor& w : ws) outs.push_back(w.grad().node());
  std::vector<ir::NodePtr> params;
  const ir::Graph g = compiler::simplify(ir::flatten(outs, &params));
  ir::Graph r = g;
  compiler::rematerialize_parameter_casts(r);
  const auto before = parameter_casts(g), after = parameter_casts(r);
  ASSERT_EQ(before.size(), static_cast<size_t>(kLayers + 1));  // the weights and the input
  ASSERT_EQ(after.size(), before.size());
  int again = 0;
  for (const auto& [w, casts] : after) {
    ASSERT_EQ(before.at(w).size(), 1u);
    ASSERT_LE(casts.size(), 2u);
    if (casts.size() == 1) continue;
    ++again;
    // The second copy comes right before its reader, a product, which the
    // first copy does not feed.
    const ir::GraphNode& reader = r.nodes[casts[1] + 1];
    EXPECT_EQ(reader.op, ir::Op::MatMul);
    EXPECT_NE(std::find(reader.inputs.begin(), reader.inputs.end(), casts[1]), reader.inputs.end());
    EXPECT_EQ(std::find(reader.inputs.begin(), reader.inputs.end(), casts[0]), reader.inputs.end());
  }
  // The first layers' copies are read far apart; the last layers' forward
  // and backward products are close together.
  EXPECT_GT(again, kLayers / 3);
  EXPECT_LT(again, kLayers);
  EXPECT_EQ(r.nodes.size(), g.nodes.size() + static_cast<size_t>(again));
  EXPECT_EQ(r.outputs.size(), g.outputs.size());

  // The step still computes its values: the first layer's gradient follows
  // an f32 run's to bf16 precision compounded over 60 layers (0.14), where
  // another weight's copy in a product would move it by order 1.
  const std::vector<double> bf = ws[0].grad().to_vector<double>();
  std::vector<Tensor> w32;
  Tensor h = Tensor::from_vector(testing::uniform_values(4 * 16, 1), {4, 16});
  for (int l = 0; l < kLayers; ++l) {
    w32.push_back(Tensor::from_vector(testing::uniform_values(16 * 16, 10 + l, -0.6f, 0.6f), {16, 16}).requires_grad_());
    h = gelu(linear(h, w32.back()));
  }
  sum(h * h).backward();
  EXPECT_LT(testing::relative_error(bf, w32[0].grad().to_vector<double>()), 0.3);
}

}  // namespace
}  // namespace kiln
