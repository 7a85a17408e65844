#include "kiln/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kiln/core/error.h"

namespace kiln::optim {
namespace {

// HF's SchedulerType values that kiln does not implement: named in the error
// so that a valid HF name is not reported as a typo.
const std::vector<std::string> kUnsupportedHfTypes = {"reduce_lr_on_plateau", "warmup_stable_decay"};

// HF 4.40's get_scheduler builds these without scheduler_specific_kwargs.
bool ignores_kwargs(const std::string& type) {
  return type == "constant" || type == "constant_with_warmup" || type == "inverse_sqrt";
}

// kiln builds with -march=native, where GCC contracts a * b + c into one FMA
// (a single rounding); Python rounds the product first. A volatile store
// forces that rounding, so the rates match PyTorch's bit for bit.
double rounded(double v) {
  volatile double r = v;
  return r;
}

// Python's x % 1.0: the result takes the divisor's sign (fmod takes x's), so
// a negative num_cycles stays in [0, 1) as in HF.
double python_mod1(double x) {
  double r = std::fmod(x, 1.0);
  if (r < 0) r += 1.0;
  return r;
}

}  // namespace

const std::vector<std::string>& LRSchedule::types() {
  static const std::vector<std::string> names = {"linear",     "cosine",         "constant",
                                                 "constant_with_warmup", "polynomial", "cosine_with_restarts",
                                                 "inverse_sqrt", "cosine_with_min_lr"};
  return names;
}

std::vector<std::string> LRSchedule::kwarg_names(const std::string& type) {
  if (type == "cosine" || type == "cosine_with_restarts") return {"num_cycles"};
  if (type == "polynomial") return {"lr_end", "power"};
  if (type == "cosine_with_min_lr") return {"num_cycles", "min_lr", "min_lr_rate"};
  return {};
}

LRSchedule::LRSchedule(std::string type, double base_lr, int64_t warmup_steps, int64_t total_steps,
                       const Kwargs& kwargs)
    : type_(std::move(type)), kind_(Kind::Linear), base_lr_(base_lr), warmup_steps_(warmup_steps),
      total_steps_(total_steps) {
  const auto& names = types();
  auto it = std::find(names.begin(), names.end(), type_);
  if (it == names.end()) {
    bool hf = std::find(kUnsupportedHfTypes.begin(), kUnsupportedHfTypes.end(), type_) != kUnsupportedHfTypes.end();
    throw Error("lr_scheduler_type '" + type_ + "' " +
                (hf ? "is a Hugging Face schedule that kiln does not implement" : "is not a known schedule") +
                "; expected one of: " + joined(names));
  }
  kind_ = static_cast<Kind>(it - names.begin());
  KILN_CHECK(std::isfinite(base_lr_) && base_lr_ >= 0, "lr schedule '", type_,
             "': base learning rate must be finite and >= 0, got ", base_lr_);
  KILN_CHECK(warmup_steps_ >= 0, "lr schedule '", type_, "': warmup_steps must be >= 0, got ", warmup_steps_);
  KILN_CHECK(total_steps_ >= 0, "lr schedule '", type_, "': total_steps must be >= 0, got ", total_steps_);

  // Keyword arguments, as HF passes them to the schedule function.
  const std::vector<std::string> takes = kwarg_names(type_);
  for (const auto& [key, value] : kwargs) {
    if (ignores_kwargs(type_)) {
      ignored_.push_back(key);
      continue;
    }
    KILN_CHECK(std::find(takes.begin(), takes.end(), key) != takes.end(), "lr_scheduler_kwargs: lr schedule '",
               type_, "' takes ", takes.empty() ? std::string("no keyword arguments") : "only " + joined(takes),
               "; got '", key, "'");
    KILN_CHECK(std::isfinite(value), "lr_scheduler_kwargs: '", key, "' must be a finite number, got ", value);
  }
  auto given = [&](const char* key) { return kwargs.count(key) > 0 && !ignores_kwargs(type_); };
  if (given("num_cycles")) num_cycles_ = kwargs.at("num_cycles");
  else if (kind_ == Kind::CosineWithRestarts) num_cycles_ = 1.0;
  if (given("lr_end")) lr_end_ = kwargs.at("lr_end");
  if (given("power")) power_ = kwargs.at("power");
  if (kind_ == Kind::CosineWithMinLr) {
    KILN_CHECK(!(given("min_lr") && given("min_lr_rate")),
               "lr_scheduler_kwargs: lr schedule 'cosine_with_min_lr' takes one of min_lr or min_lr_rate, not both");
    KILN_CHECK(given("min_lr") || given("min_lr_rate"), "lr schedule 'cosine_with_min_lr' needs min_lr or ",
               "min_lr_rate in lr_scheduler_kwargs (e.g. --lr_scheduler_kwargs '{\"min_lr_rate\": 0.1}')");
    min_lr_rate_ = given("min_lr") ? kwargs.at("min_lr") / base_lr_ : kwargs.at("min_lr_rate");
    KILN_CHECK(std::isfinite(min_lr_rate_), "lr schedule 'cosine_with_min_lr': min_lr / learning_rate is not finite (",
               "learning_rate ", base_lr_, ")");
  }
  if (kind_ == Kind::Polynomial) {
    KILN_CHECK(base_lr_ > lr_end_, "lr schedule 'polynomial': lr_end (", lr_end_,
               ") must be smaller than the initial learning rate (", base_lr_, ")");
    KILN_CHECK(total_steps_ != warmup_steps_, "lr schedule 'polynomial': total_steps (", total_steps_,
               ") must differ from warmup_steps (", warmup_steps_, "): the decay would last 0 steps");
  }
}

double LRSchedule::multiplier(int64_t step) const {
  KILN_CHECK(step >= 0, "lr schedule '", type_, "': step must be >= 0, got ", step);
  // Python's int -> float conversions and true division, in the same order as
  // HF's lambdas, so the doubles agree bit for bit.
  const double s = static_cast<double>(step), w = static_cast<double>(warmup_steps_),
               t = static_cast<double>(total_steps_);
  if (kind_ == Kind::Constant) return 1.0;
  if (step < warmup_steps_) return s / std::max(1.0, w);
  switch (kind_) {
    case Kind::Linear:
      return std::max(0.0, (t - s) / std::max(1.0, t - w));
    case Kind::Cosine: {
      double progress = (s - w) / std::max(1.0, t - w);
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles_ * 2.0 * progress)));
    }
    case Kind::CosineWithMinLr: {
      double progress = (s - w) / std::max(1.0, t - w);
      double factor = 0.5 * (1.0 + std::cos(std::numbers::pi * num_cycles_ * 2.0 * progress));
      factor = rounded(factor * (1.0 - min_lr_rate_)) + min_lr_rate_;
      return std::max(0.0, factor);
    }
    case Kind::ConstantWithWarmup:
      return 1.0;
    case Kind::CosineWithRestarts: {  // HF's default num_cycles = 1: one full descent, then 0
      const double progress = (s - w) / std::max(1.0, t - w);
      if (progress >= 1.0) return 0.0;
      return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * python_mod1(num_cycles_ * progress))));
    }
    case Kind::InverseSqrt: {  // timescale: the warmup, or 10000 without one; the total is not used
      const int64_t timescale = warmup_steps_ > 0 ? warmup_steps_ : 10000;
      const int64_t shift = timescale - warmup_steps_;
      return 1.0 / std::sqrt(static_cast<double>(step + shift) / static_cast<double>(timescale));
    }
    case Kind::Polynomial: {
      if (step > total_steps_) return lr_end_ / base_lr_;
      double lr_range = base_lr_ - lr_end_;
      double pct_remaining = 1.0 - (s - w) / (t - w);
      double decay = rounded(lr_range * std::pow(pct_remaining, power_)) + lr_end_;
      return decay / base_lr_;
    }
    case Kind::Constant:
      break;
  }
  KILN_ASSERT(false);
  return 0.0;
}

double LRSchedule::lr(int64_t step) const { return base_lr_ * multiplier(step); }

}  // namespace kiln::optim
