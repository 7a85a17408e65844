// Gradients of every differentiable op against central finite differences.
#include "kiln/ir/builder.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::gradcheck;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

std::vector<float> data(size_t n, float scale = 1.0f, float shift = 0.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = shift + scale * std::sin(1.3f * static_cast<float>(i) + 0.4f);
  return v;
}

TEST(GradCheck, Unary) {
  std::vector<std::pair<const char*, Fn>> fns = {
      {"neg", [](auto& x) { return neg(x[0]); }},      {"exp", [](auto& x) { return exp(x[0]); }},
      {"tanh", [](auto& x) { return tanh(x[0]); }},    {"erf", [](auto& x) { return erf(x[0]); }},
      {"sigmoid", [](auto& x) { return sigmoid(x[0]); }},  {"silu", [](auto& x) { return silu(x[0]); }},
      {"gelu", [](auto& x) { return gelu(x[0]); }},    {"gelu_tanh", [](auto& x) { return gelu(x[0], "tanh"); }},
      {"abs", [](auto& x) { return abs(x[0]); }},      {"relu", [](auto& x) { return relu(x[0]); }},
  };
  for (auto& [name, f] : fns) {
    SCOPED_TRACE(name);
    gradcheck(f, {data(6, 1.5f, 0.05f)}, {{2, 3}});
  }
  std::vector<std::pair<const char*, Fn>> positive = {
      {"log", [](auto& x) { return log(x[0]); }},
      {"sqrt", [](auto& x) { return sqrt(x[0]); }},
      {"rsqrt", [](auto& x) { return rsqrt(x[0]); }},
      {"pow_scalar", [](auto& x) { return pow(x[0], 1.7); }},
  };
  for (auto& [name, f] : positive) {
    SCOPED_TRACE(name);
    gradcheck(f, {data(6, 0.5f, 1.5f)}, {{2, 3}});
  }
}

TEST(GradCheck, BinaryWithBroadcasting) {
  std::vector<std::pair<const char*, Fn>> fns = {
      {"add", [](auto& x) { return x[0] + x[1]; }},
      {"sub", [](auto& x) { return x[0] - x[1]; }},
      {"mul", [](auto& x) { return x[0] * x[1]; }},
      {"div", [](auto& x) { return x[0] / x[1]; }},
      {"pow", [](auto& x) { return pow(x[0], x[1]); }},
      {"maximum", [](auto& x) { return maximum(x[0], x[1]); }},
      {"minimum", [](auto& x) { return minimum(x[0], x[1]); }},
      {"where", [](auto& x) { return where(gt(x[0], x[1]), x[0] * 2.0, x[1]); }},
  };
  for (auto& [name, f] : fns) {
    SCOPED_TRACE(name);
    gradcheck(f, {data(8, 0.5f, 1.5f), data(4, 0.4f, 1.2f)}, {{2, 1, 4}, {4}});
  }
}

TEST(GradCheck, ReductionsAndMovement) {
  std::vector<std::pair<const char*, Fn>> fns = {
      {"sum_0_2", [](auto& x) { return sum(x[0], {0, 2}); }},
      {"mean_1", [](auto& x) { return mean(x[0], {1}, true); }},
      {"amax_2", [](auto& x) { return amax(x[0], {2}); }},
      {"reshape", [](auto& x) { return reshape(x[0], {4, 6}) * 1.5; }},
      {"permute", [](auto& x) { return permute(x[0], {2, 0, 1}) * x[0].dim(0); }},
      {"transpose_then_mul", [](auto& x) { return transpose(x[0], 0, 2) * transpose(x[0], 0, 2); }},
      {"broadcast", [](auto& x) { return broadcast_to(slice(x[0], 1, 0, 1), {3, 2, 3, 4}); }},
      {"slice_step", [](auto& x) { return slice(x[0], 2, 0, 4, 2); }},
      {"concat", [](auto& x) { return concat({x[0], x[0] * 2.0}, 1); }},
      {"reshape_of_permute", [](auto& x) { return reshape(permute(x[0], {1, 0, 2}), {-1}) * 2.0; }},
  };
  for (auto& [name, f] : fns) {
    SCOPED_TRACE(name);
    gradcheck(f, {data(24)}, {{2, 3, 4}});
  }
}

TEST(GradCheck, IndexingAndMatmul) {
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{0, 3, 3, 1}, {2, 2});
  gradcheck([&](auto& x) { return index_select(x[0], ids); }, {data(12)}, {{4, 3}});
  Tensor idx = Tensor::from_vector(std::vector<int64_t>{0, 2, 1, 2, 2, 0}, {2, 3});
  gradcheck([&](auto& x) { return gather(x[0], 1, idx); }, {data(12)}, {{2, 6}});
  gradcheck([&](auto& x) { return scatter_add(x[0], 1, idx, x[1]); }, {data(12), data(6)}, {{2, 6}, {2, 3}});
  Tensor slots = Tensor::from_vector(std::vector<int64_t>{3, 0}, {2});  // x's slices 3 and 0 along dim 1 replaced
  gradcheck([&](auto& x) { return index_copy(x[0], 1, slots, x[1]) * x[0]; }, {data(24), data(12)},
            {{2, 4, 3}, {2, 2, 3}});
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE(std::to_string(ta) + std::to_string(tb));
      Shape sa = ta ? Shape{2, 4, 3} : Shape{2, 3, 4};
      Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
      gradcheck([&](auto& x) { return matmul(x[0], x[1], ta, tb); }, {data(24), data(20)}, {sa, sb});
    }
}

TEST(GradCheck, Composites) {
  Tensor mask = Tensor::from_vector(std::vector<float>{0, 0, -10000, 0, 0, 0, 0, -10000}, {2, 1, 4});
  gradcheck([&](auto& x) { return softmax(x[0], -1, mask); }, {data(24)}, {{2, 3, 4}});
  gradcheck([](auto& x) { return softmax(x[0], 1); }, {data(24)}, {{2, 3, 4}});
  gradcheck([](auto& x) { return log_softmax(x[0], -1); }, {data(24)}, {{2, 3, 4}});
  gradcheck([](auto& x) { return layer_norm(x[0], x[1], x[2], 1e-5); }, {data(24, 2.0f), data(8), data(8)},
            {{3, 8}, {8}, {8}});
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, -100, 4, 0}, {4});
  for (double ls : {0.0, 0.1}) {
    SCOPED_TRACE(ls);
    gradcheck([&](auto& x) { return cross_entropy(x[0], labels, -100, ls); }, {data(20, 2.0f)}, {{4, 5}});
  }
  gradcheck([](auto& x) { return mse_loss(x[0], x[1]); }, {data(6), data(6, 0.3f)}, {{6}, {6}});
  gradcheck([](auto& x) { return binary_cross_entropy_with_logits(x[0], sigmoid(x[1])); },
            {data(6), data(6, 0.3f)}, {{6}, {6}});
}

// Op::Rope for x, cos and sin: tables shared by the batch, per batch row,
// and the transposed rotation (the op its gradient builds) directly.
TEST(GradCheck, Rope) {
  gradcheck([](auto& x) { return rope(x[0], x[1], x[2]); }, {data(48), data(12, 0.8f), data(12, 0.6f, 0.1f)},
            {{2, 2, 3, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}});
  gradcheck([](auto& x) { return rope(x[0], x[1], x[2]); }, {data(48), data(24, 0.8f), data(24, 0.6f, 0.1f)},
            {{2, 2, 3, 4}, {2, 1, 3, 4}, {2, 1, 3, 4}});
  auto transposed = [](auto& x) {
    return Tensor(ir::make_op(ir::Op::Rope, {x[0].node(), x[1].node(), x[2].node()}, ir::RopeAttrs{true}));
  };
  gradcheck(transposed, {data(48), data(12, 0.8f), data(12, 0.6f, 0.1f)}, {{2, 2, 3, 4}, {1, 1, 3, 4}, {1, 1, 3, 4}});
}

}  // namespace
}  // namespace kiln
