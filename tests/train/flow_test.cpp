// step_control: what an optimizer step logs, evaluates and saves, as HF's
// DefaultFlowCallback.on_step_end decides it.
#include <gtest/gtest.h>

#include <vector>

#include "kiln/train/flow.h"

namespace kiln::train {
namespace {

// The steps in 1..n whose control has `which` set.
template <typename Which>
std::vector<int64_t> steps_where(const TrainingArguments& a, const StepIntervals& every, int64_t n,
                                 int64_t steps_per_epoch, Which which, bool has_eval = true) {
  std::vector<int64_t> out;
  for (int64_t s = 1; s <= n; ++s)
    if (which(step_control(a, every, s, static_cast<double>(s) / steps_per_epoch, has_eval))) out.push_back(s);
  return out;
}

const auto logs = [](const StepControl& c) { return c.should_log; };
const auto evaluates = [](const StepControl& c) { return c.should_evaluate; };
const auto saves = [](const StepControl& c) { return c.should_save; };

TEST(Flow, LogsEveryLoggingStepsAndTheFirstWhenAsked) {
  TrainingArguments a;
  a.logging_strategy = "steps";
  EXPECT_EQ(steps_where(a, {3, 0, 0}, 10, 4, logs), (std::vector<int64_t>{3, 6, 9}));
  a.logging_first_step = true;
  EXPECT_EQ(steps_where(a, {3, 0, 0}, 10, 4, logs), (std::vector<int64_t>{1, 3, 6, 9}));
  a.logging_first_step = false;
  a.logging_strategy = "epoch";
  EXPECT_EQ(steps_where(a, {3, 0, 0}, 10, 4, logs), (std::vector<int64_t>{4, 8}));
  a.logging_strategy = "no";
  EXPECT_EQ(steps_where(a, {3, 0, 0}, 10, 4, logs), std::vector<int64_t>{});
}

TEST(Flow, EvaluatesAfterTheDelayAndOnlyWithAnEvaluationSet) {
  TrainingArguments a;
  a.eval_strategy = "steps";
  EXPECT_EQ(steps_where(a, {0, 2, 0}, 8, 4, evaluates), (std::vector<int64_t>{2, 4, 6, 8}));
  a.eval_delay = 5;  // steps, under eval_strategy steps
  EXPECT_EQ(steps_where(a, {0, 2, 0}, 8, 4, evaluates), (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(steps_where(a, {0, 2, 0}, 8, 4, evaluates, false), std::vector<int64_t>{});
  a.eval_strategy = "epoch";
  a.eval_delay = 2;  // epochs, under eval_strategy epoch
  EXPECT_EQ(steps_where(a, {0, 2, 0}, 12, 4, evaluates), (std::vector<int64_t>{8, 12}));
}

TEST(Flow, SavesEverySaveStepsOrAtEachEpochsEnd) {
  TrainingArguments a;
  a.save_strategy = "steps";
  EXPECT_EQ(steps_where(a, {0, 0, 5}, 12, 4, saves), (std::vector<int64_t>{5, 10}));
  EXPECT_EQ(steps_where(a, {0, 0, 0}, 12, 4, saves), std::vector<int64_t>{});  // no interval, no saves
  a.save_strategy = "epoch";
  EXPECT_EQ(steps_where(a, {0, 0, 5}, 12, 4, saves), (std::vector<int64_t>{4, 8, 12}));
  a.save_strategy = "no";
  EXPECT_EQ(steps_where(a, {0, 0, 5}, 12, 4, saves), std::vector<int64_t>{});
}

// A step ends an epoch when its epoch is a whole number, up to the rounding
// of batches / batches_per_epoch.
TEST(Flow, AnEpochEndsOnlyAtAWholeEpoch) {
  TrainingArguments a;
  a.save_strategy = "epoch";
  EXPECT_FALSE(step_control(a, {}, 3, 0.75, true).should_save);
  EXPECT_TRUE(step_control(a, {}, 4, 1.0, true).should_save);
  EXPECT_TRUE(step_control(a, {}, 7, 2.0 - 1e-12, true).should_save);
}

// The run's last step (max_steps) evaluates and saves under the steps strategies even off the intervals,
// as DefaultFlowCallback does when training stops; the eval delay still decides.
TEST(Flow, TheLastStepEvaluatesAndSavesUnderTheStepsStrategies) {
  TrainingArguments a;
  a.eval_strategy = "steps";
  a.save_strategy = "steps";
  const StepIntervals every{0, 4, 4};
  EXPECT_FALSE(step_control(a, every, 7, 1.75, true).should_evaluate);
  const StepControl last = step_control(a, every, 7, 1.75, true, true);
  EXPECT_TRUE(last.should_evaluate);
  EXPECT_TRUE(last.should_save);
  EXPECT_FALSE(last.should_log);  // no log of its own
  EXPECT_FALSE(step_control(a, every, 7, 1.75, false, true).should_evaluate);  // no evaluation set
  a.eval_delay = 8;
  EXPECT_FALSE(step_control(a, every, 7, 1.75, true, true).should_evaluate);
  // Halfway through an epoch, the last step ends it for the epoch strategies (HF's on_epoch_end after the loop).
  a.eval_delay = 0;
  a.eval_strategy = "epoch";
  a.save_strategy = "epoch";
  a.logging_strategy = "epoch";
  EXPECT_FALSE(step_control(a, every, 7, 1.75, true).should_log);
  const StepControl epoch_last = step_control(a, every, 7, 1.75, true, true);
  EXPECT_TRUE(epoch_last.should_log);
  EXPECT_TRUE(epoch_last.should_evaluate);
  EXPECT_TRUE(epoch_last.should_save);
  a.eval_delay = 2;  // epochs
  EXPECT_FALSE(step_control(a, every, 7, 1.75, true, true).should_evaluate);
}

}  // namespace
}  // namespace kiln::train
