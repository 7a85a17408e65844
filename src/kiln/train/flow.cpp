#include "kiln/train/flow.h"

#include <cmath>

namespace kiln::train {

StepControl step_control(const TrainingArguments& args, const StepIntervals& every, int64_t step, double epoch,
                         bool has_eval, bool last_step) {
  // HF ends the epoch loop when training stops, so the last step also does what an epoch's end does.
  const bool epoch_end = last_step || std::abs(epoch - std::round(epoch)) < 1e-9;
  StepControl c;
  c.should_log = (args.logging_first_step && step == 1) ||
                 (args.logging_strategy == "steps" && every.logging_steps > 0 && step % every.logging_steps == 0) ||
                 (args.logging_strategy == "epoch" && epoch_end);
  c.should_evaluate =
      has_eval && ((args.eval_strategy == "steps" && every.eval_steps > 0 && step % every.eval_steps == 0 &&
                    args.eval_delay <= static_cast<double>(step)) ||
                   (args.eval_strategy == "epoch" && epoch_end && args.eval_delay <= epoch));
  c.should_save = (args.save_strategy == "steps" && every.save_steps > 0 && step % every.save_steps == 0) ||
                  (args.save_strategy == "epoch" && epoch_end);
  if (last_step) {  // DefaultFlowCallback: the last step when should_training_stop
    c.should_evaluate = c.should_evaluate || (has_eval && args.eval_strategy == "steps" &&
                                              args.eval_delay <= static_cast<double>(step));
    c.should_save = c.should_save || args.save_strategy == "steps";
  }
  return c;
}

}  // namespace kiln::train
