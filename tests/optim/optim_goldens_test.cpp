// Every optimizer `--optim` names against PyTorch (tests/goldens/optim_goldens.json,
// tests/goldens/gen_optim_goldens.py): torch.optim's AdamW, SGD, Adagrad and
// RMSprop, and Hugging Face's Adafactor as the Trainer builds it. Five steps
// with given gradients, a learning rate that changes between steps, weight
// decay for two of the three parameters (a matrix, a rank-3 tensor, a
// vector); the parameters after every step and the state after the last.
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "support/test_util.h"

namespace kiln {
namespace {

const nlohmann::json& goldens() {
  static const nlohmann::json j = [] {
    std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/optim_goldens.json");
    if (!in) throw Error("missing tests/goldens/optim_goldens.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<double> values(const nlohmann::json& j) { return j.get<std::vector<double>>(); }

struct Run {
  std::map<std::string, Tensor> params;
  std::unique_ptr<optim::Optimizer> opt;
  std::vector<std::string> order;  // optimizer groups' order: decayed first
};

Run build(const std::string& optim) {
  const auto& g = goldens();
  Run run;
  optim::ParamGroup groups[2] = {{{}, g["weight_decay"].get<double>()}, {{}, 0.0}};
  const auto decayed = g["decayed"].get<std::vector<std::string>>();
  for (int pass = 0; pass < 2; ++pass)
    for (const auto& p : g["params"]) {
      const std::string name = p["name"];
      const bool decays = std::find(decayed.begin(), decayed.end(), name) != decayed.end();
      if (decays != (pass == 0)) continue;
      std::vector<float> init = p["init"].get<std::vector<float>>();
      Tensor t = Tensor::from_vector(init, p["shape"].get<Shape>(), Device::cpu(), name).requires_grad_();
      run.params[name] = t;
      run.order.push_back(name);
      groups[pass].params.push_back(t);
    }
  std::vector<optim::ParamGroup> used(std::begin(groups), std::end(groups));
  const double lr = g["lrs"][0];
  if (optim == "sgd_momentum") run.opt = std::make_unique<optim::SGD>(used, optim::SGDOptions{.lr = lr, .momentum = 0.9});
  else run.opt = optim::make_optimizer(optim, used, {.lr = lr});
  return run;
}

void check_case(const std::string& optim) {
  const auto& g = goldens();
  const nlohmann::json* c = nullptr;
  for (const auto& x : g["cases"])
    if (x["optim"] == optim) c = &x;
  ASSERT_NE(c, nullptr) << optim;
  Run run = build(optim);
  for (size_t k = 0; k < g["lrs"].size(); ++k) {
    for (auto& [name, p] : run.params) {
      std::vector<float> grad = g["grads"][k][name].get<std::vector<float>>();
      p.set_grad(Tensor::from_vector(grad, p.shape()));
    }
    run.opt->set_lr(g["lrs"][k]);
    run.opt->step();
    mark_step();
    for (auto& [name, p] : run.params)
      EXPECT_TRUE(testing::all_close(p.to_vector<double>(), values((*c)["params_after_step"][k][name]), 2e-6, 1e-7))
          << optim << ": " << name << " after step " << k + 1;
  }
  EXPECT_EQ(run.opt->steps_taken(), static_cast<int64_t>(g["lrs"].size()));
  // The state under PyTorch's names and shapes, in state_spec's order.
  for (size_t gi = 0; gi < run.opt->groups().size(); ++gi)
    for (size_t i = 0; i < run.opt->groups()[gi].params.size(); ++i) {
      const std::string name = run.opt->groups()[gi].params[i].name();
      const auto& want = (*c)["state"][name];
      const auto& have = run.opt->state(gi, i);
      ASSERT_EQ(have.size(), want.size()) << optim << ": " << name;
      const auto spec = run.opt->state_spec(run.opt->groups()[gi].params[i].shape());
      ASSERT_EQ(spec.size(), have.size());
      for (size_t s = 0; s < have.size(); ++s) {
        SCOPED_TRACE(optim + ": state " + name + "." + have[s].name);
        EXPECT_EQ(spec[s].first, have[s].name);
        ASSERT_TRUE(want.contains(have[s].name));
        EXPECT_EQ(have[s].value.shape(), want[have[s].name]["shape"].get<Shape>());
        EXPECT_EQ(spec[s].second, have[s].value.shape());
        EXPECT_TRUE(testing::all_close(have[s].value.to_vector<double>(), values(want[have[s].name]["values"]), 2e-6,
                                       1e-9));
      }
    }
}

TEST(OptimGoldens, AdamW) { check_case("adamw_torch"); }
TEST(OptimGoldens, Adafactor) { check_case("adafactor"); }
TEST(OptimGoldens, Sgd) { check_case("sgd"); }
TEST(OptimGoldens, SgdWithMomentum) { check_case("sgd_momentum"); }
TEST(OptimGoldens, Adagrad) { check_case("adagrad"); }
TEST(OptimGoldens, RMSprop) { check_case("rmsprop"); }

// Adafactor keeps a row and a column per matrix, not a full second moment:
// a [1000, 500] weight holds 1500 numbers of state, AdamW's 1 000 000.
TEST(OptimGoldens, AdafactorStateIsFactored) {
  Tensor w = zeros({1000, 500}).requires_grad_();
  Tensor t = zeros({4, 6, 8}).requires_grad_();
  Tensor b = zeros({500}).requires_grad_();
  auto opt = optim::make_optimizer("adafactor", {{{w, t, b}, 0.0}}, {});
  EXPECT_EQ(opt->state(0, 0)[0].value.shape(), (Shape{1000}));
  EXPECT_EQ(opt->state(0, 0)[1].value.shape(), (Shape{500}));
  EXPECT_EQ(opt->state(0, 1)[0].value.shape(), (Shape{4, 6}));
  EXPECT_EQ(opt->state(0, 1)[1].value.shape(), (Shape{4, 8}));
  EXPECT_EQ(opt->state(0, 2)[0].name, "exp_avg_sq");
  EXPECT_EQ(opt->state(0, 2)[0].value.shape(), (Shape{500}));
}

TEST(OptimGoldens, UnknownOptimizerIsAnError) {
  Tensor w = zeros({2}).requires_grad_();
  EXPECT_EQ(testing::error_of([&] { optim::make_optimizer("lion", {{{w}, 0.0}}, {}); }),
            "optim: unknown optimizer 'lion' (expected one of: adamw_torch, adamw_torch_fused, adafactor, sgd, "
            "adagrad, rmsprop)");
}

}  // namespace
}  // namespace kiln
