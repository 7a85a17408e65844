#pragma once
// What an optimizer step of the training loop does besides updating the
// model: HF's TrainerControl as its DefaultFlowCallback sets it in
// on_step_end, from logging_strategy / logging_steps / logging_first_step,
// eval_strategy / eval_steps / eval_delay and save_strategy / save_steps.
// Stopping (max_steps, early stopping, a stop signal) is the Trainer's.
#include <cstdint>

#include "kiln/train/training_args.h"

namespace kiln::train {

struct StepControl {
  bool should_log = false;
  bool should_evaluate = false;
  bool should_save = false;
};

// The step intervals a run resolved from its arguments (TrainerState's
// logging_steps, eval_steps and save_steps: ratios already turned into steps).
struct StepIntervals {
  int64_t logging_steps = 0, eval_steps = 0, save_steps = 0;
};

// The control after optimizer step `step` (1-based), which ended at `epoch`
// (fractional; a whole number at an epoch's end). `has_eval`: there is an
// evaluation set (without one nothing is evaluated). `last_step`: the run's
// max_steps-th step, which HF also evaluates (eval_strategy steps) and saves
// (save_strategy steps) when the intervals miss it, and which ends an epoch
// for the epoch strategies even halfway through one (HF's on_epoch_end runs
// when training stops).
StepControl step_control(const TrainingArguments& args, const StepIntervals& every, int64_t step, double epoch,
                         bool has_eval, bool last_step = false);

}  // namespace kiln::train
