// Gradient checkpointing: the recomputed segments give the gradients of the
// plain graph (dropout masks included), and the compiled step keeps fewer
// activations.
#include <cmath>

#include "kiln/compiler/compile.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using kiln::testing::all_close;

struct Stack {
  static constexpr int64_t kWidth = 64, kRows = 32, kLayers = 6;
  std::vector<Tensor> w, b, gamma, beta;
  Tensor x;
  Stack() {
    auto wavy = [](int64_t n, double scale, double phase) {
      std::vector<float> v(n);
      for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(0.7 * i + phase));
      return v;
    };
    for (int64_t l = 0; l < kLayers; ++l) {
      w.push_back(Tensor::from_vector(wavy(kWidth * kWidth, 0.2, l), {kWidth, kWidth}).requires_grad_());
      b.push_back(Tensor::from_vector(wavy(kWidth, 0.1, l + 0.5), {kWidth}).requires_grad_());
      gamma.push_back(Tensor::from_vector(wavy(kWidth, 0.1, l + 0.2), {kWidth}).requires_grad_());
      beta.push_back(Tensor::from_vector(wavy(kWidth, 0.1, l + 0.7), {kWidth}).requires_grad_());
    }
    x = Tensor::from_vector(wavy(kRows * kWidth, 1.0, 0.3), {kRows, kWidth}).requires_grad_();
  }
  // One residual block: LayerNorm(h + dropout(gelu(h W^T + b))).
  Tensor block(int64_t l, const Tensor& h, Generator& gen) const {
    Tensor a = dropout(gelu(linear(h, w[l], b[l])), 0.3, gen);
    return layer_norm(h + a, gamma[l], beta[l]);
  }
  Tensor loss(bool checkpointed, Generator& gen) const {
    Tensor h = x;
    for (int64_t l = 0; l < kLayers; ++l) {
      if (checkpointed)
        h = checkpoint([this, l, &gen](const std::vector<Tensor>& in) { return block(l, in[0], gen); }, {h}, &gen);
      else
        h = block(l, h, gen);
    }
    return sum(h * h) * 0.01;
  }
  std::vector<Tensor> params() const {
    std::vector<Tensor> all{x};
    for (int64_t l = 0; l < kLayers; ++l) all.insert(all.end(), {w[l], b[l], gamma[l], beta[l]});
    return all;
  }
};

std::vector<std::vector<double>> gradients(bool checkpointed, double* loss_value) {
  Stack s;
  Generator gen(7);
  Tensor loss = s.loss(checkpointed, gen);
  loss.backward();
  *loss_value = loss.item();
  std::vector<std::vector<double>> out;
  for (const auto& p : s.params()) out.push_back(p.grad().to_vector<double>());
  return out;
}

TEST(Checkpoint, RecomputedSegmentsGiveThePlainGradientsWithTheSameDropoutMasks) {
  double plain_loss = 0, ckpt_loss = 0;
  auto plain = gradients(false, &plain_loss);
  auto ckpt = gradients(true, &ckpt_loss);
  EXPECT_EQ(plain_loss, ckpt_loss);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(all_close(ckpt[i], plain[i], 1e-5, 1e-7)) << "tensor " << i;
}

TEST(Checkpoint, TheCompiledStepKeepsFewerActivations) {
  auto arena = [](bool checkpointed) {
    Stack s;
    Generator gen(7);
    Tensor loss = s.loss(checkpointed, gen);
    loss.backward();
    std::vector<ir::NodePtr> outs{loss.node()};
    for (const auto& p : s.params()) outs.push_back(p.grad().node());
    std::vector<ir::NodePtr> params;
    auto prog = compiler::compile(ir::flatten(outs, &params));
    return prog.arena_bytes;
  };
  size_t plain = arena(false), ckpt = arena(true);
  EXPECT_LT(ckpt, plain * 3 / 4) << "arena " << ckpt << " bytes with checkpointing, " << plain << " without";
}

TEST(Checkpoint, UnderNoGradItIsThePlainFunction) {
  Stack s;
  Generator gen(7);
  NoGradGuard no_grad;
  Tensor h = checkpoint([&](const std::vector<Tensor>& in) { return s.block(0, in[0], gen); }, {s.x}, &gen);
  EXPECT_FALSE(h.requires_grad());
  EXPECT_EQ(h.node()->recompute, nullptr);
}

}  // namespace
}  // namespace kiln
