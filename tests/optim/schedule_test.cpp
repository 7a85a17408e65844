// LRSchedule against Hugging Face's get_scheduler run through PyTorch's LambdaLR
// (tests/goldens/schedule_goldens.json, tests/goldens/gen_schedule_goldens.py),
// compared bit for bit, plus a few values worked out by hand from HF's formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <numbers>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/optim/schedule.h"
#include "support/test_util.h"

namespace kiln::optim {
namespace {

using kiln::testing::error_of;

TEST(Schedule, MatchesTorchLambdaLRGoldensExactly) {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/schedule_goldens.json");
  ASSERT_TRUE(in) << "missing tests/goldens/schedule_goldens.json";
  auto goldens = nlohmann::json::parse(in);
  ASSERT_GE(goldens["cases"].size(), 10u);
  std::set<std::string> types_seen;
  int with_kwargs = 0;
  for (const auto& c : goldens["cases"]) {
    LRSchedule::Kwargs kwargs;
    const nlohmann::json given = c.value("lr_scheduler_kwargs", nlohmann::json::object());
    for (const auto& [k, v] : given.items()) kwargs[k] = v;
    with_kwargs += !kwargs.empty();
    LRSchedule s(c["type"], c["base_lr"], c["warmup_steps"], c["total_steps"], kwargs);
    types_seen.insert(s.type());
    const auto& lrs = c["lrs"];
    for (size_t step = 0; step < lrs.size(); ++step)
      EXPECT_EQ(s.lr(static_cast<int64_t>(step)), lrs[step].get<double>())
          << c["type"] << " warmup " << c["warmup_steps"] << " total " << c["total_steps"] << " kwargs "
          << given.dump() << " step " << step;
  }
  EXPECT_EQ(types_seen.size() + 1, LRSchedule::types().size());  // + reduce_lr_on_plateau: below
  EXPECT_GE(with_kwargs, 10);
}

// ReduceLROnPlateau against torch.optim.lr_scheduler.ReduceLROnPlateau fed
// the same metrics (the goldens' plateau_cases): the rate after every step,
// bit for bit, and the state torch's state_dict ends with.
TEST(Schedule, ReduceLROnPlateauMatchesTorchExactly) {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/schedule_goldens.json");
  ASSERT_TRUE(in) << "missing tests/goldens/schedule_goldens.json";
  auto goldens = nlohmann::json::parse(in);
  ASSERT_GE(goldens["plateau_cases"].size(), 7u);
  for (const auto& c : goldens["plateau_cases"]) {
    SCOPED_TRACE(c["lr_scheduler_kwargs"].dump());
    ReduceLROnPlateau p(c["base_lr"], ReduceLROnPlateau::parse(c["lr_scheduler_kwargs"]));
    EXPECT_EQ(p.lr(), c["base_lr"].get<double>());
    const auto& metrics = c["metrics"];
    for (size_t k = 0; k < metrics.size(); ++k) {
      p.step(metrics[k]);
      EXPECT_EQ(p.lr(), c["lrs"][k].get<double>()) << "after evaluation " << k + 1;
    }
    nlohmann::json state = p.state_dict();
    for (const char* key : {"best", "num_bad_epochs", "cooldown_counter", "last_epoch"})
      EXPECT_EQ(state[key], c["state"][key]) << key;
    EXPECT_EQ(state["_last_lr"], c["lrs"].back());
  }
  // The schedule itself holds the base rate, without warmup.
  LRSchedule s("reduce_lr_on_plateau", 1e-3, 10, 100);
  EXPECT_EQ(s.lr(0), 1e-3);
  EXPECT_EQ(s.lr(99), 1e-3);
}

TEST(Schedule, ReduceLROnPlateauByHand) {
  ReduceLROnPlateau p(1.0, ReduceLROnPlateau::parse({{"patience", 1}, {"factor", 0.5}}));
  // A NaN metric is never better: a bad evaluation (torch compares the same way).
  p.step(1.0);
  p.step(std::nan(""));
  EXPECT_EQ(p.lr(), 1.0);
  p.step(std::nan(""));
  EXPECT_EQ(p.lr(), 0.5);
  // The state round-trips, an infinite best as null.
  ReduceLROnPlateau fresh(2.0, ReduceLROnPlateau::parse(nlohmann::json::object()));
  EXPECT_TRUE(fresh.state_dict()["best"].is_null());
  ReduceLROnPlateau copy(1.0, ReduceLROnPlateau::parse({{"patience", 1}, {"factor", 0.5}}));
  copy.load_state_dict(p.state_dict(), "scheduler.json");
  EXPECT_EQ(copy.state_dict(), p.state_dict());
  copy.step(5.0);
  p.step(5.0);
  EXPECT_EQ(copy.state_dict(), p.state_dict());
  fresh.load_state_dict(fresh.state_dict(), "scheduler.json");
  fresh.step(3.0);  // better than +inf
  EXPECT_EQ(fresh.state_dict()["best"], 3.0);
  EXPECT_EQ(error_of([&] { copy.load_state_dict({{"best", 1.0}}, "ck/scheduler.json"); }),
            "ck/scheduler.json: reduce_lr_on_plateau state has no 'num_bad_epochs'");
  EXPECT_EQ(error_of([&] {
              copy.load_state_dict({{"best", "x"}, {"num_bad_epochs", 0}, {"cooldown_counter", 0}, {"last_epoch", 0},
                                    {"_last_lr", 1.0}},
                                   "ck/scheduler.json");
            }),
            "ck/scheduler.json: 'best' must be a number or null, got \"x\"");
}

TEST(Schedule, ReduceLROnPlateauKwargErrors) {
  const std::string where = "lr_scheduler_kwargs: lr schedule 'reduce_lr_on_plateau': ";
  auto parse_error = [](const nlohmann::json& j) { return error_of([&] { ReduceLROnPlateau::parse(j); }); };
  EXPECT_EQ(parse_error({{"patience", 2.5}}), where + "'patience' must be a whole number >= 0, got 2.5");
  EXPECT_EQ(parse_error({{"cooldown", -1}}), where + "'cooldown' must be a whole number >= 0, got -1");
  EXPECT_EQ(parse_error({{"mode", "maximum"}}), where + "'mode' must be one of min, max, got \"maximum\"");
  EXPECT_EQ(parse_error({{"threshold_mode", 1}}), where + "'threshold_mode' must be one of rel, abs, got 1");
  EXPECT_EQ(parse_error({{"factor", 1.0}}), where + "'factor' must be < 1.0, got 1");
  EXPECT_EQ(parse_error({{"factor", "0.5"}}), where + "'factor' must be a finite number, got \"0.5\"");
  EXPECT_EQ(parse_error({{"verbose", true}}),
            where + "takes only mode, factor, patience, threshold, threshold_mode, cooldown, min_lr, eps; got "
                    "'verbose'");
  EXPECT_EQ(parse_error({{"min_lr", -1e-5}}), where + "'min_lr' must be >= 0, got -1e-05");
}

TEST(Schedule, LinearByHand) {
  LRSchedule s("linear", 1e-3, 10, 110);
  EXPECT_DOUBLE_EQ(s.multiplier(0), 0.0);  // the first step trains with lr 0, as in HF
  EXPECT_DOUBLE_EQ(s.multiplier(5), 0.5);
  EXPECT_DOUBLE_EQ(s.multiplier(9), 0.9);
  EXPECT_DOUBLE_EQ(s.multiplier(10), 1.0);  // warmup ends
  EXPECT_DOUBLE_EQ(s.multiplier(60), 0.5);
  EXPECT_DOUBLE_EQ(s.multiplier(109), 0.01);  // last step
  EXPECT_DOUBLE_EQ(s.multiplier(110), 0.0);
  EXPECT_DOUBLE_EQ(s.multiplier(500), 0.0);  // clamped after total
  EXPECT_DOUBLE_EQ(s.lr(60), 5e-4);
}

TEST(Schedule, CosineByHand) {
  LRSchedule s("cosine", 2.0, 4, 104);
  EXPECT_DOUBLE_EQ(s.lr(2), 1.0);
  EXPECT_DOUBLE_EQ(s.multiplier(4), 1.0);
  EXPECT_NEAR(s.multiplier(29), 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-15);
  EXPECT_NEAR(s.multiplier(54), 0.5, 1e-15);
  EXPECT_NEAR(s.multiplier(104), 0.0, 1e-15);
  // Past the end HF keeps following the cosine (num_cycles 0.5: it rises again).
  EXPECT_NEAR(s.multiplier(154), 0.5, 1e-15);
}

TEST(Schedule, ConstantsByHand) {
  LRSchedule c("constant", 3e-5, 10, 100);  // HF's constant ignores warmup
  EXPECT_EQ(c.lr(0), 3e-5);
  EXPECT_EQ(c.lr(1000), 3e-5);
  LRSchedule w("constant_with_warmup", 3e-5, 4, 100);
  EXPECT_DOUBLE_EQ(w.multiplier(1), 0.25);
  EXPECT_EQ(w.multiplier(4), 1.0);
  EXPECT_EQ(w.multiplier(1000), 1.0);
}

TEST(Schedule, PolynomialIsAbsoluteRateOverBaseLr) {
  // lr = (base - lr_end) * (1 - (step - W) / (T - W)) + lr_end, then / base * base.
  const double base = 1e-3, end = LRSchedule::kPolynomialLrEnd;
  LRSchedule s("polynomial", base, 2, 12);
  EXPECT_DOUBLE_EQ(s.multiplier(1), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(2), base);
  EXPECT_DOUBLE_EQ(s.lr(7), (base - end) * 0.5 + end);
  EXPECT_DOUBLE_EQ(s.lr(12), end);  // ends at lr_end, not 0
  EXPECT_DOUBLE_EQ(s.lr(13), end);
  EXPECT_DOUBLE_EQ(s.multiplier(100), end / base);
}

TEST(Schedule, RestartsAndInverseSqrtByHand) {
  LRSchedule r("cosine_with_restarts", 2.0, 4, 104);
  EXPECT_DOUBLE_EQ(r.multiplier(2), 0.5);
  EXPECT_DOUBLE_EQ(r.multiplier(4), 1.0);
  EXPECT_NEAR(r.multiplier(54), 0.5, 1e-15);  // halfway down one full cosine cycle
  EXPECT_DOUBLE_EQ(r.multiplier(104), 0.0);  // progress 1: 0, and 0 after
  EXPECT_DOUBLE_EQ(r.multiplier(150), 0.0);
  LRSchedule q("inverse_sqrt", 1.0, 10, 0);  // the total is not used
  EXPECT_DOUBLE_EQ(q.multiplier(5), 0.5);
  EXPECT_DOUBLE_EQ(q.multiplier(10), 1.0);
  EXPECT_DOUBLE_EQ(q.multiplier(40), 0.5);  // sqrt(10 / 40)
  LRSchedule z("inverse_sqrt", 1.0, 0, 0);  // no warmup: timescale 10000
  EXPECT_DOUBLE_EQ(z.multiplier(0), 1.0);
  EXPECT_DOUBLE_EQ(z.multiplier(30000), 0.5);
}

TEST(Schedule, KwargsByHand) {
  LRSchedule c("cosine", 1.0, 0, 100, {{"num_cycles", 1.0}});  // a full cosine: back to the top at the end
  EXPECT_NEAR(c.multiplier(50), 0.0, 1e-15);
  EXPECT_NEAR(c.multiplier(100), 1.0, 1e-15);
  LRSchedule m("cosine_with_min_lr", 2.0, 0, 10, {{"min_lr", 0.5}});  // rate 0.25
  EXPECT_DOUBLE_EQ(m.lr(0), 2.0);
  EXPECT_DOUBLE_EQ(m.lr(10), 0.5);
  EXPECT_DOUBLE_EQ(m.lr(5), 2.0 * (0.5 * 0.75 + 0.25));
  LRSchedule p("polynomial", 1.0, 0, 10, {{"lr_end", 0.1}, {"power", 2.0}});
  EXPECT_DOUBLE_EQ(p.lr(5), 0.9 * 0.25 + 0.1);
  EXPECT_DOUBLE_EQ(p.lr(20), 0.1);
  LRSchedule r("cosine_with_restarts", 1.0, 0, 100, {{"num_cycles", 2.0}});  // restarts at the halfway point
  EXPECT_NEAR(r.multiplier(49), 0.5 * (1 + std::cos(std::numbers::pi * 0.98)), 1e-15);
  EXPECT_DOUBLE_EQ(r.multiplier(50), 1.0);
  LRSchedule q("inverse_sqrt", 1.0, 10, 0, {{"timescale", 50}});  // HF 4.40 builds it without kwargs
  EXPECT_EQ(q.ignored_kwargs(), std::vector<std::string>{"timescale"});
  EXPECT_DOUBLE_EQ(q.multiplier(40), 0.5);
  EXPECT_TRUE(c.ignored_kwargs().empty());
}

TEST(Schedule, KwargErrors) {
  std::string e = error_of([] { LRSchedule("linear", 1e-3, 0, 10, {{"num_cycles", 2}}); });
  EXPECT_NE(e.find("'linear' takes no keyword arguments; got 'num_cycles'"), std::string::npos) << e;
  e = error_of([] { LRSchedule("cosine", 1e-3, 0, 10, {{"num_cycle", 2}}); });
  EXPECT_NE(e.find("takes only num_cycles; got 'num_cycle'"), std::string::npos) << e;
  e = error_of([] { LRSchedule("polynomial", 1e-3, 0, 10, {{"min_lr", 2}}); });
  EXPECT_NE(e.find("takes only lr_end, power"), std::string::npos) << e;
  e = error_of([] { LRSchedule("cosine_with_min_lr", 1e-3, 0, 10); });
  EXPECT_NE(e.find("needs min_lr or min_lr_rate"), std::string::npos) << e;
  e = error_of([] { LRSchedule("cosine_with_min_lr", 1e-3, 0, 10, {{"min_lr", 1e-5}, {"min_lr_rate", 0.1}}); });
  EXPECT_NE(e.find("not both"), std::string::npos) << e;
  e = error_of([] { LRSchedule("polynomial", 1e-3, 0, 10, {{"lr_end", 1e-3}}); });
  EXPECT_NE(e.find("lr_end (0.001) must be smaller"), std::string::npos) << e;
  e = error_of([] { LRSchedule("cosine", 1e-3, 0, 10, {{"num_cycles", HUGE_VAL}}); });
  EXPECT_NE(e.find("'num_cycles' must be a finite number"), std::string::npos) << e;
}

TEST(Schedule, Errors) {
  std::string e = error_of([] { LRSchedule("cosine_warm", 1e-3, 0, 10); });
  EXPECT_NE(e.find("'cosine_warm'"), std::string::npos) << e;
  EXPECT_NE(e.find("linear, cosine, constant, constant_with_warmup, polynomial, cosine_with_restarts, inverse_sqrt, "
                   "cosine_with_min_lr"),
            std::string::npos)
      << e;
  e = error_of([] { LRSchedule("warmup_stable_decay", 1e-3, 0, 10); });
  EXPECT_NE(e.find("kiln does not implement"), std::string::npos) << e;
  e = error_of([] { LRSchedule("polynomial", 1e-8, 0, 10); });
  EXPECT_NE(e.find("lr_end"), std::string::npos) << e;
  e = error_of([] { LRSchedule("polynomial", 1e-3, 5, 5); });
  EXPECT_NE(e.find("total_steps (5)"), std::string::npos) << e;
  EXPECT_THROW(LRSchedule("linear", 1e-3, -1, 10), Error);
  EXPECT_THROW(LRSchedule("linear", 1e-3, 0, -10), Error);
  EXPECT_THROW(LRSchedule("linear", 1e-3, 0, 10).lr(-1), Error);
}

}  // namespace
}  // namespace kiln::optim
