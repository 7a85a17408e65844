// Optimizers against the update rules computed on the host in double.
#include "support/test_util.h"

namespace kiln {
namespace {

TEST(Optim, AdamWMatchesTorchFormula) {
  std::vector<float> w0{0.5f, -1.0f, 2.0f};
  Tensor w = Tensor::from_vector(w0, {3}).requires_grad_();
  Tensor target = Tensor::from_vector(std::vector<float>{1.0f, 1.0f, 1.0f}, {3});
  optim::AdamW opt({w}, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05});
  std::vector<double> p(w0.begin(), w0.end()), m(3, 0), v(3, 0);
  for (int t = 1; t <= 5; ++t) {
    opt.zero_grad();
    sum((w - target) * (w - target)).backward();
    opt.step();
    mark_step();
    for (int i = 0; i < 3; ++i) {
      double g = 2 * (p[i] - 1.0);
      p[i] *= 1 - 0.1 * 0.05;
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.99 * v[i] + 0.01 * g * g;
      double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(0.99, t)) + 1e-8;
      p[i] -= 0.1 / (1 - std::pow(0.9, t)) * m[i] / denom;
    }
  }
  EXPECT_TRUE(testing::all_close(w.to_vector<double>(), p, 1e-5, 1e-6));
}

TEST(Optim, SgdWithMomentum) {
  Tensor w = Tensor::from_vector(std::vector<float>{1.0f}, {1}).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  double p = 1.0, buf = 0;
  for (int t = 0; t < 4; ++t) {
    opt.zero_grad();
    sum(w * w * 3.0).backward();
    opt.step();
    mark_step();
    buf = 0.9 * buf + 6 * p;
    p -= 0.1 * buf;
  }
  EXPECT_NEAR(w.item(), p, 1e-5);
}

TEST(Optim, RejectsParametersThatDoNotRequireGrad) {
  Tensor w = Tensor::from_vector(std::vector<float>{1.0f}, {1});
  EXPECT_THROW(optim::SGD({w}), Error);
}

}  // namespace
}  // namespace kiln
