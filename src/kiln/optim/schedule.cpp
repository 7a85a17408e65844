#include "kiln/optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/core/error.h"

namespace kiln::optim {
namespace {

// HF's SchedulerType values that kiln does not implement: named in the error
// so that a valid HF name is not reported as a typo.
const std::vector<std::string> kUnsupportedHfTypes = {"warmup_stable_decay"};

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
                                                 "inverse_sqrt", "cosine_with_min_lr", "reduce_lr_on_plateau"};
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
  if (kind_ == Kind::Constant || kind_ == Kind::ReduceOnPlateau) return 1.0;
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
    case Kind::ReduceOnPlateau:
      break;
  }
  KILN_ASSERT(false);
  return 0.0;
}

double LRSchedule::lr(int64_t step) const { return base_lr_ * multiplier(step); }

const std::vector<std::string>& ReduceLROnPlateau::kwarg_names() {
  static const std::vector<std::string> names = {"mode",     "factor", "patience", "threshold",
                                                 "threshold_mode", "cooldown", "min_lr", "eps"};
  return names;
}

ReduceLROnPlateau::Options ReduceLROnPlateau::parse(const nlohmann::json& kwargs) {
  const std::string where = "lr_scheduler_kwargs: lr schedule 'reduce_lr_on_plateau': ";
  KILN_CHECK(kwargs.is_object(), where, "expected a JSON object, got ", excerpt(kwargs.dump()));
  Options o;
  auto number = [&](const std::string& key, const nlohmann::json& v) {
    KILN_CHECK(v.is_number() && !v.is_boolean() && std::isfinite(v.get<double>()), where, "'", key,
               "' must be a finite number, got ", excerpt(v.dump()));
    return v.get<double>();
  };
  auto count = [&](const std::string& key, const nlohmann::json& v) {
    KILN_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, where, "'", key,
               "' must be a whole number >= 0, got ", excerpt(v.dump()));
    return v.get<int64_t>();
  };
  auto word = [&](const std::string& key, const nlohmann::json& v, const std::vector<std::string>& allowed) {
    KILN_CHECK(v.is_string() && std::find(allowed.begin(), allowed.end(), v.get<std::string>()) != allowed.end(),
               where, "'", key, "' must be one of ", joined(allowed), ", got ", excerpt(v.dump()));
    return v.get<std::string>();
  };
  for (const auto& [key, v] : kwargs.items()) {
    if (key == "mode") o.mode = word(key, v, {"min", "max"});
    else if (key == "threshold_mode") o.threshold_mode = word(key, v, {"rel", "abs"});
    else if (key == "factor") o.factor = number(key, v);
    else if (key == "threshold") o.threshold = number(key, v);
    else if (key == "min_lr") o.min_lr = number(key, v);
    else if (key == "eps") o.eps = number(key, v);
    else if (key == "patience") o.patience = count(key, v);
    else if (key == "cooldown") o.cooldown = count(key, v);
    else
      throw Error(where + "takes only " + joined(kwarg_names()) + "; got '" + key + "'");
  }
  KILN_CHECK(o.factor < 1.0, where, "'factor' must be < 1.0, got ", o.factor);
  KILN_CHECK(o.min_lr >= 0, where, "'min_lr' must be >= 0, got ", o.min_lr);
  return o;
}

ReduceLROnPlateau::ReduceLROnPlateau(double base_lr, Options options)
    : options_(std::move(options)),
      lr_(base_lr),
      best_(options_.mode == "min" ? std::numeric_limits<double>::infinity()
                                   : -std::numeric_limits<double>::infinity()) {}

bool ReduceLROnPlateau::better(double a) const {
  const double t = options_.threshold;
  if (options_.mode == "min")
    return options_.threshold_mode == "rel" ? a < best_ * (1.0 - t) : a < best_ - t;
  return options_.threshold_mode == "rel" ? a > best_ * (t + 1.0) : a > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  ++last_epoch_;
  if (better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // in cooldown: evaluations count as good
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    const double reduced = std::max(lr_ * options_.factor, options_.min_lr);
    if (lr_ - reduced > options_.eps) lr_ = reduced;
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

nlohmann::json ReduceLROnPlateau::state_dict() const {
  return {{"best", std::isfinite(best_) ? nlohmann::json(best_) : nlohmann::json(nullptr)},
          {"num_bad_epochs", num_bad_epochs_},
          {"cooldown_counter", cooldown_counter_},
          {"last_epoch", last_epoch_},
          {"_last_lr", lr_}};
}

void ReduceLROnPlateau::load_state_dict(const nlohmann::json& state, const std::string& where) {
  auto field = [&](const char* key) -> const nlohmann::json& {
    KILN_CHECK(state.is_object() && state.contains(key), where, ": reduce_lr_on_plateau state has no '", key, "'");
    return state.at(key);
  };
  const auto& best = field("best");
  KILN_CHECK(best.is_null() || best.is_number(), where, ": 'best' must be a number or null, got ", excerpt(best.dump()));
  for (const char* key : {"num_bad_epochs", "cooldown_counter", "last_epoch"})
    KILN_CHECK(field(key).is_number_integer() && field(key).get<int64_t>() >= 0, where, ": '", key,
               "' must be a whole number >= 0, got ", excerpt(field(key).dump()));
  KILN_CHECK(field("_last_lr").is_number() && field("_last_lr").get<double>() >= 0, where,
             ": '_last_lr' must be a number >= 0, got ", excerpt(field("_last_lr").dump()));
  best_ = best.is_null() ? (options_.mode == "min" ? std::numeric_limits<double>::infinity()
                                                   : -std::numeric_limits<double>::infinity())
                         : best.get<double>();
  num_bad_epochs_ = field("num_bad_epochs").get<int64_t>();
  cooldown_counter_ = field("cooldown_counter").get<int64_t>();
  last_epoch_ = field("last_epoch").get<int64_t>();
  lr_ = field("_last_lr").get<double>();
}

}  // namespace kiln::optim
