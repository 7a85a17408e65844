#pragma once
// Learning-rate schedules: Hugging Face's get_scheduler (transformers 4.40,
// optimization.py) as torch.optim.lr_scheduler.LambdaLR evaluates it.
//
// HF builds each schedule as a multiplier m(step) of the optimizer's base
// learning rate; LambdaLR then sets lr = base_lr * m(step), where step counts
// the optimizer steps already taken (0 for the first update). W = warmup
// steps, T = total steps:
//   warmup (all but constant)  step < W:  m = step / max(1, W)
//   linear                     m = max(0, (T - step) / max(1, T - W))
//   cosine                     m = max(0, 0.5 (1 + cos(pi * 2 * 0.5 * (step - W) / max(1, T - W))))
//   constant                   m = 1 (no warmup, as HF's get_constant_schedule ignores it)
//   constant_with_warmup       m = 1 after warmup
//   cosine_with_restarts (num_cycles 1)
//                              p = (step - W) / max(1, T - W); m = 0 when p >= 1,
//                              else max(0, 0.5 (1 + cos(pi * ((num_cycles * p) % 1))))
//   inverse_sqrt               m = 1 / sqrt((step + S - W) / S), S = W or 10000 when W = 0
//   polynomial (lr_end 1e-7, power 1)
//                              step > T:  m = lr_end / base_lr
//                              otherwise: m = ((base_lr - lr_end) * (1 - (step - W) / (T - W))^power + lr_end) / base_lr
//   cosine_with_min_lr (num_cycles 0.5; min_lr_rate r, or min_lr / base_lr)
//                              m = max(0, c * (1 - r) + r), c the cosine factor above
//   reduce_lr_on_plateau       m = 1, no warmup (HF returns this schedule before
//                              it reads the warmup); the rate then changes only
//                              after evaluations: see ReduceLROnPlateau below
// The polynomial multiplier is an absolute rate divided by base_lr, which
// LambdaLR multiplies back; lr() does the same two roundings, so its values
// are bit-identical to PyTorch's.
//
// lr_scheduler_kwargs (HF's TrainingArguments field) are the schedule
// functions' keyword arguments, passed as HF 4.40's get_scheduler passes them:
// cosine and cosine_with_restarts take num_cycles, polynomial lr_end and
// power, cosine_with_min_lr num_cycles and exactly one of min_lr / min_lr_rate,
// linear none (HF raises TypeError on any). constant, constant_with_warmup and
// inverse_sqrt are built without them: they are ignored (ignored_kwargs()).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::optim {

class LRSchedule {
 public:
  using Kwargs = std::map<std::string, double>;
  // Throws kiln::Error for an unknown type (listing the valid ones), negative
  // step counts, a keyword the schedule does not take (naming the ones it
  // does), polynomial with base_lr <= lr_end (HF's check) or with total_steps
  // == warmup_steps (HF divides by T - W: ZeroDivisionError), and
  // cosine_with_min_lr with neither or both of min_lr and min_lr_rate.
  LRSchedule(std::string type, double base_lr, int64_t warmup_steps, int64_t total_steps, const Kwargs& kwargs = {});

  // The learning rate for optimizer step `step` (0-based): base_lr * multiplier(step).
  double lr(int64_t step) const;
  // HF's lr_lambda at `step`.
  double multiplier(int64_t step) const;

  const std::string& type() const { return type_; }
  double base_lr() const { return base_lr_; }
  int64_t warmup_steps() const { return warmup_steps_; }
  int64_t total_steps() const { return total_steps_; }

  // The schedule names kiln implements, as HF's SchedulerType spells them.
  static const std::vector<std::string>& types();
  // The keyword arguments HF passes to `type`'s schedule function.
  static std::vector<std::string> kwarg_names(const std::string& type);
  // Keywords given for a schedule HF builds without them (constant,
  // constant_with_warmup, inverse_sqrt): accepted and not used, as in HF.
  const std::vector<std::string>& ignored_kwargs() const { return ignored_; }

  // HF's polynomial defaults (get_polynomial_decay_schedule_with_warmup).
  static constexpr double kPolynomialLrEnd = 1e-7;
  static constexpr double kPolynomialPower = 1.0;

 private:
  enum class Kind {
    Linear,
    Cosine,
    Constant,
    ConstantWithWarmup,
    Polynomial,
    CosineWithRestarts,
    InverseSqrt,
    CosineWithMinLr,
    ReduceOnPlateau
  };
  std::string type_;
  Kind kind_;
  double base_lr_;
  int64_t warmup_steps_, total_steps_;
  double num_cycles_ = 0.5, lr_end_ = kPolynomialLrEnd, power_ = kPolynomialPower, min_lr_rate_ = 0.0;
  std::vector<std::string> ignored_;
};

// torch.optim.lr_scheduler.ReduceLROnPlateau, as Hugging Face's Trainer
// drives it for lr_scheduler_type reduce_lr_on_plateau: after each
// evaluation during training, step(the eval metric metric_for_best_model
// names, "loss" by default). A metric that is not better than the best so
// far (mode min: below best·(1 - threshold), or best - threshold with
// threshold_mode abs; mode max: above) is a bad evaluation; after more than
// `patience` of them in a row the rate becomes max(lr·factor, min_lr)
// (unless that changes it by eps or less), followed by `cooldown`
// evaluations that count as good. HF passes lr_scheduler_kwargs as the
// constructor's keyword arguments; mode is "min" whatever metric it is.
class ReduceLROnPlateau {
 public:
  struct Options {
    std::string mode = "min";  // or "max"
    double factor = 0.1;
    int64_t patience = 10;
    double threshold = 1e-4;
    std::string threshold_mode = "rel";  // or "abs"
    int64_t cooldown = 0;
    double min_lr = 0.0;
    double eps = 1e-8;
  };
  // lr_scheduler_kwargs under torch's names: a key torch does not take, a
  // value of the wrong type, factor >= 1 (torch's check), a negative patience
  // or cooldown, or an unknown mode is an error naming the key.
  static Options parse(const nlohmann::json& kwargs);
  static const std::vector<std::string>& kwarg_names();

  ReduceLROnPlateau(double base_lr, Options options);
  double lr() const { return lr_; }
  void step(double metric);

  // The state a checkpoint keeps (torch's state_dict names: best,
  // num_bad_epochs, cooldown_counter, last_epoch, _last_lr); an infinite
  // best (no evaluation yet) is null.
  nlohmann::json state_dict() const;
  // `where` names the file in errors.
  void load_state_dict(const nlohmann::json& state, const std::string& where);

 private:
  bool better(double a) const;
  Options options_;
  double lr_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0, last_epoch_ = 0;
};

}  // namespace kiln::optim
