// The progress line's rate and time left come from completed units.
#include "kiln/train/progress.h"

#include <gtest/gtest.h>

#include "support/test_util.h"

namespace kiln::train {
namespace {

TEST(ProgressLine, RateAndEtaFromCompletionsNotFromQueueing) {
  double now = 0;
  ProgressLine p("", "step", 100, 8, /*enabled=*/false, /*terminal=*/false, 0, [&] { return now; });
  // The host queues steps at once; the device completes one every half second after a 10 s first step.
  now = 10;
  p.completed(1);
  EXPECT_NEAR(p.units_per_second(), 0.1, 1e-12);  // one completion: since the start, compilation included
  for (int64_t s = 2; s <= 30; ++s) {
    now += 0.5;
    p.completed(s);
  }
  // The window has left the first step behind: 2 steps/s, 16 samples/s, 70 steps left = 35 s.
  EXPECT_NEAR(p.units_per_second(), 2.0, 1e-9);
  EXPECT_EQ(p.text(30, "loss 0.5000"), " 30% | step 30/100 | loss 0.5000 | 16.0 samples/s | ETA 0:00:35");
}

TEST(ProgressLine, ResumedRunCountsFromItsFirstStep) {
  double now = 0;
  ProgressLine p("", "step", 10, 1, false, false, /*initial=*/6, [&] { return now; });
  now = 2;
  p.completed(7);
  EXPECT_NEAR(p.units_per_second(), 0.5, 1e-12);  // one step in 2 s, not seven
  EXPECT_EQ(p.text(7, ""), " 70% | step 7/10 | 0.5 samples/s | ETA 0:00:06");
}

TEST(ProgressLine, EvaluationLineAndNoRateBeforeAnyCompletion) {
  double now = 0;
  ProgressLine p("eval", "batch", 574, 32, false, false, 0, [&] { return now; });
  EXPECT_EQ(p.units_per_second(), 0);
  EXPECT_EQ(p.text(0, ""), "eval   0% | batch 0/574 | 0.0 samples/s | ETA 0:00:00");
  EXPECT_EQ(format_duration(3725.4), "1:02:05");
}

}  // namespace
}  // namespace kiln::train
