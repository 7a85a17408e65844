#include "kiln/train/training_args.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <sstream>
#include <type_traits>
#include <variant>

#include "kiln/core/device.h"
#include "kiln/core/error.h"
#include "kiln/io/json_file.h"
#include "kiln/optim/optimizer.h"
#include "kiln/optim/schedule.h"
#include "kiln/train/hf_fields.h"

namespace kiln::train {
namespace {

using TA = TrainingArguments;
using json = nlohmann::json;

// One entry per field: the flag/JSON name, a pointer to the member, and for
// string fields with a fixed set of values, that set (checked like argparse's
// `choices`, so a typo fails at the flag that has it).
using Member = std::variant<std::string TA::*, bool TA::*, int64_t TA::*, uint64_t TA::*, double TA::*,
                            std::optional<int64_t> TA::*, std::optional<uint64_t> TA::*,
                            std::optional<std::string> TA::*, std::optional<bool> TA::*, json TA::*,
                            std::optional<double> TA::*>;
struct Field {
  std::string name;
  Member member;
  std::vector<std::string> choices;
};

const std::vector<std::string> kStrategies = {"no", "steps", "epoch"};

const std::vector<Field>& fields() {
  static const std::vector<Field> table = {
      {"output_dir", &TA::output_dir, {}},
      {"overwrite_output_dir", &TA::overwrite_output_dir, {}},
      {"do_train", &TA::do_train, {}},
      {"do_eval", &TA::do_eval, {}},
      {"do_predict", &TA::do_predict, {}},
      {"eval_strategy", &TA::eval_strategy, kStrategies},
      {"eval_steps", &TA::eval_steps, {}},
      {"per_device_train_batch_size", &TA::per_device_train_batch_size, {}},
      {"per_device_eval_batch_size", &TA::per_device_eval_batch_size, {}},
      {"gradient_accumulation_steps", &TA::gradient_accumulation_steps, {}},
      {"learning_rate", &TA::learning_rate, {}},
      {"weight_decay", &TA::weight_decay, {}},
      {"adam_beta1", &TA::adam_beta1, {}},
      {"adam_beta2", &TA::adam_beta2, {}},
      {"adam_epsilon", &TA::adam_epsilon, {}},
      {"max_grad_norm", &TA::max_grad_norm, {}},
      {"num_train_epochs", &TA::num_train_epochs, {}},
      {"max_steps", &TA::max_steps, {}},
      {"lr_scheduler_type", &TA::lr_scheduler_type, optim::LRSchedule::types()},
      {"lr_scheduler_kwargs", &TA::lr_scheduler_kwargs, {}},
      {"warmup_ratio", &TA::warmup_ratio, {}},
      {"warmup_steps", &TA::warmup_steps, {}},
      {"logging_strategy", &TA::logging_strategy, kStrategies},
      {"logging_steps", &TA::logging_steps, {}},
      {"logging_first_step", &TA::logging_first_step, {}},
      {"logging_nan_inf_filter", &TA::logging_nan_inf_filter, {}},
      {"eval_delay", &TA::eval_delay, {}},
      {"eval_on_start", &TA::eval_on_start, {}},
      {"eval_accumulation_steps", &TA::eval_accumulation_steps, {}},
      {"save_strategy", &TA::save_strategy, kStrategies},
      {"save_steps", &TA::save_steps, {}},
      {"save_total_limit", &TA::save_total_limit, {}},
      {"save_only_model", &TA::save_only_model, {}},
      {"seed", &TA::seed, {}},
      {"data_seed", &TA::data_seed, {}},
      {"dataloader_drop_last", &TA::dataloader_drop_last, {}},
      {"dataloader_num_workers", &TA::dataloader_num_workers, {}},
      {"group_by_length", &TA::group_by_length, {}},
      {"load_best_model_at_end", &TA::load_best_model_at_end, {}},
      {"metric_for_best_model", &TA::metric_for_best_model, {}},
      {"greater_is_better", &TA::greater_is_better, {}},
      {"resume_from_checkpoint", &TA::resume_from_checkpoint, {}},
      {"ignore_data_skip", &TA::ignore_data_skip, {}},
      {"label_smoothing_factor", &TA::label_smoothing_factor, {}},
      {"gradient_checkpointing", &TA::gradient_checkpointing, {}},
      {"tf32", &TA::tf32, {}},
      {"bf16", &TA::bf16, {}},
      {"fp16", &TA::fp16, {}},
      {"use_cpu", &TA::use_cpu, {}},
      {"include_num_input_tokens_seen", &TA::include_num_input_tokens_seen, {}},
      {"ddp_bucket_cap_mb", &TA::ddp_bucket_cap_mb, {}},
      {"ddp_timeout", &TA::ddp_timeout, {}},
      {"report_to", &TA::report_to, {}},
      {"logging_dir", &TA::logging_dir, {}},
      {"run_name", &TA::run_name, {}},
      {"disable_tqdm", &TA::disable_tqdm, {}},
      {"optim", &TA::optim, optim::optimizer_names()},
      {"save_safetensors", &TA::save_safetensors, {}},
      {"push_to_hub", &TA::push_to_hub, {}},
      {"predict_with_generate", &TA::predict_with_generate, {}},
      {"generation_max_length", &TA::generation_max_length, {}},
      {"generation_num_beams", &TA::generation_num_beams, {}},
      {"num_replicas", &TA::num_replicas, {}},
      {"shard_optimizer_state", &TA::shard_optimizer_state, {}},
      {"metrics_debug", &TA::metrics_debug, {}},
      {"device", &TA::device, {}},
      {"early_stopping_patience", &TA::early_stopping_patience, {}},
      {"early_stopping_threshold", &TA::early_stopping_threshold, {}},
  };
  return table;
}

// The deprecated HF names of eval_strategy and use_cpu (still accepted by transformers 4.40), and transformers 5's
// new name of gradient_checkpointing (which 5 keeps as the deprecated alias).
constexpr const char* kEvalStrategyAlias = "evaluation_strategy";
constexpr const char* kUseCpuAlias = "no_cuda";
constexpr const char* kCheckpointingName = "activation_checkpointing";

const Field* find_field(const std::string& name) {
  const std::string canonical = name == kEvalStrategyAlias   ? std::string("eval_strategy")
                                : name == kUseCpuAlias       ? std::string("use_cpu")
                                : name == kCheckpointingName ? std::string("gradient_checkpointing")
                                                             : name;
  for (const auto& f : fields())
    if (f.name == canonical) return &f;
  return nullptr;
}

bool is_bool_field(const Field& f) {
  return std::holds_alternative<bool TA::*>(f.member) || std::holds_alternative<std::optional<bool> TA::*>(f.member);
}


template <typename T>
std::optional<T> parse_number(const std::string& text) {
  std::string_view v = text;
  if (!v.empty() && v.front() == '+') v.remove_prefix(1);
  if (v.empty()) return std::nullopt;
  T out{};
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size()) return std::nullopt;
  if constexpr (std::is_floating_point_v<T>)
    if (!std::isfinite(out)) return std::nullopt;
  return out;
}

// Sets field f of `a` from a command-line value; `flag` is how errors name it.
void set_from_text(TA& a, const Field& f, const std::string& value, const std::string& flag) {
  auto bad = [&](const std::string& expected) {
    return Error(flag + ": invalid value '" + excerpt(value) + "' (expected " + expected + ")");
  };
  std::visit(
      [&](auto member) {
        using M = std::remove_reference_t<decltype(a.*member)>;
        if constexpr (std::is_same_v<M, std::string> || std::is_same_v<M, std::optional<std::string>>) {
          if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(), value) == f.choices.end()) {
            std::string near = closest_name(value, f.choices);
            throw Error(flag + ": invalid value '" + value + "' (expected one of: " + joined(f.choices) + ")" +
                        (near.empty() ? "" : "; did you mean '" + near + "'?"));
          }
          a.*member = value;
        } else if constexpr (std::is_same_v<M, bool> || std::is_same_v<M, std::optional<bool>>) {
          auto b = parse_bool_word(value);
          if (!b) throw bad("true, false, 1 or 0");
          a.*member = *b;
        } else if constexpr (std::is_same_v<M, int64_t> || std::is_same_v<M, std::optional<int64_t>>) {
          auto n = parse_number<int64_t>(value);
          if (!n) throw bad("an integer");
          a.*member = *n;
        } else if constexpr (std::is_same_v<M, uint64_t> || std::is_same_v<M, std::optional<uint64_t>>) {
          auto n = parse_number<uint64_t>(value);
          if (!n) throw bad("a non-negative integer");
          a.*member = *n;
        } else if constexpr (std::is_same_v<M, json>) {
          json j;
          try {
            j = parse_json(value, flag);
          } catch (const Error& e) {  // the usual message, then where the JSON breaks
            throw Error(std::string(bad("a JSON object, e.g. '{\"num_cycles\": 2}'").what()) + "; " + e.what());
          }
          if (!j.is_object()) throw bad("a JSON object, e.g. '{\"num_cycles\": 2}'");
          a.*member = j;
        } else {
          static_assert(std::is_same_v<M, double> || std::is_same_v<M, std::optional<double>>);
          auto n = parse_number<double>(value);
          if (!n) throw bad("a number");
          a.*member = *n;
        }
      },
      f.member);
}

// Sets field f of `a` from a JSON value; `where` ("file: key 'name'") prefixes errors.
void set_from_json(TA& a, const Field& f, const json& v, const std::string& where) {
  auto bad = [&](const std::string& expected) {
    return Error(where + ": expected " + expected + ", found " + json_found(v));
  };
  std::visit(
      [&](auto member) {
        using M = std::remove_reference_t<decltype(a.*member)>;
        constexpr bool optional = !std::is_same_v<M, std::string> && !std::is_same_v<M, bool> &&
                                  !std::is_same_v<M, int64_t> && !std::is_same_v<M, uint64_t> &&
                                  !std::is_same_v<M, double> && !std::is_same_v<M, json>;
        if constexpr (std::is_same_v<M, json>) {  // an object; HF also takes its JSON text, and null for {}
          json obj = v.is_null() ? json::object() : v.is_string() ? parse_json(v.get_ref<const std::string&>(), where) : v;
          if (!obj.is_object()) throw bad("a JSON object");
          a.*member = obj;
          return;
        }
        if constexpr (optional) {
          if (v.is_null()) {
            a.*member = std::nullopt;
            return;
          }
        }
        if constexpr (std::is_same_v<M, std::string> || std::is_same_v<M, std::optional<std::string>>) {
          if (!v.is_string()) throw bad("a string");
          std::string s = v.get<std::string>();
          if (!f.choices.empty() && std::find(f.choices.begin(), f.choices.end(), s) == f.choices.end())
            throw Error(where + ": invalid value \"" + s + "\" (expected one of: " + joined(f.choices) + ")");
          a.*member = s;
        } else if constexpr (std::is_same_v<M, bool> || std::is_same_v<M, std::optional<bool>>) {
          if (!v.is_boolean()) throw bad("true or false");
          a.*member = v.get<bool>();
        } else if constexpr (std::is_same_v<M, double> || std::is_same_v<M, std::optional<double>>) {
          if (!v.is_number()) throw bad("a number");
          a.*member = v.get<double>();
        } else {
          // Integers; Python may write a whole float (100.0) for them.
          constexpr bool is_unsigned = std::is_same_v<M, uint64_t> || std::is_same_v<M, std::optional<uint64_t>>;
          const char* expected = is_unsigned ? "a non-negative integer" : "an integer";
          if (v.is_number_unsigned()) {
            uint64_t n = v.get<uint64_t>();
            if (!is_unsigned && n > static_cast<uint64_t>(INT64_MAX)) throw bad(expected);
            a.*member = n;
          } else if (v.is_number_integer()) {
            int64_t n = v.get<int64_t>();
            if (is_unsigned && n < 0) throw bad(expected);
            a.*member = n;
          } else if (v.is_number_float()) {
            double d = v.get<double>();
            if (!(std::floor(d) == d) || std::abs(d) > 9.0e15 || (is_unsigned && d < 0)) throw bad(expected);
            a.*member = static_cast<std::conditional_t<is_unsigned, uint64_t, int64_t>>(d);
          } else {
            throw bad(expected);
          }
        }
      },
      f.member);
}

// report_to's names: split at commas and spaces.
std::vector<std::string> report_to_names(const std::string& v) {
  std::vector<std::string> names;
  std::string cur;
  for (char c : v + ",") {
    if (c == ',' || c == ' ') {
      if (!cur.empty()) names.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  return names;
}

// validate() with errors naming each field as `dash + name` ("--" after
// parse, "" otherwise) and prefixed by `where` ("args.json: " or "").
void check(const TA& a, const std::string& where, const std::string& dash) {
  auto fail = [&](const std::string& name, const std::string& msg) {
    return Error(where + dash + name + " " + msg);
  };
  auto got = [](auto v) {
    std::ostringstream os;
    os << ", got " << v;
    return os.str();
  };
  if (a.output_dir.empty()) throw Error(where + dash + "output_dir must name a directory, got an empty string");
  for (const auto& name : report_to_names(a.report_to))
    if (name != "all" && name != "none" && name != "tensorboard")
      throw fail("report_to", "'" + name + "' is not available: kiln writes only tensorboard (expected all, none, "
                              "tensorboard, or a comma-separated list of them)");
  for (const auto& f : fields()) {
    if (f.choices.empty()) continue;
    const std::string& v = a.*std::get<std::string TA::*>(f.member);
    if (std::find(f.choices.begin(), f.choices.end(), v) == f.choices.end())
      throw fail(f.name, "must be one of: " + joined(f.choices) + "; got '" + v + "'");
  }
  auto positive_int = [&](const char* name, int64_t v) {
    if (v < 1) throw fail(name, "must be a positive integer" + got(v));
  };
  positive_int("per_device_train_batch_size", a.per_device_train_batch_size);
  positive_int("per_device_eval_batch_size", a.per_device_eval_batch_size);
  positive_int("gradient_accumulation_steps", a.gradient_accumulation_steps);
  positive_int("num_replicas", a.num_replicas);

  auto in_range = [&](const char* name, double v, double lo, double hi, bool hi_open, const std::string& range) {
    if (!std::isfinite(v) || v < lo || v > hi || (hi_open && v == hi)) throw fail(name, "must be in " + range + got(v));
  };
  constexpr double inf = HUGE_VAL;
  in_range("learning_rate", a.learning_rate, 0, inf, false, "[0, inf)");
  in_range("weight_decay", a.weight_decay, 0, inf, false, "[0, inf)");
  in_range("adam_beta1", a.adam_beta1, 0, 1, true, "[0, 1)");
  in_range("adam_beta2", a.adam_beta2, 0, 1, true, "[0, 1)");
  in_range("adam_epsilon", a.adam_epsilon, 0, inf, false, "[0, inf)");
  in_range("max_grad_norm", a.max_grad_norm, 0, inf, false, "[0, inf) (0 turns clipping off)");
  in_range("num_train_epochs", a.num_train_epochs, 0, inf, false, "[0, inf)");
  in_range("warmup_ratio", a.warmup_ratio, 0, 1, false, "[0, 1]");
  in_range("label_smoothing_factor", a.label_smoothing_factor, 0, 1, true, "[0, 1)");
  if (!(a.ddp_bucket_cap_mb > 0) || !std::isfinite(a.ddp_bucket_cap_mb))
    throw fail("ddp_bucket_cap_mb", "must be a positive number of megabytes" + got(a.ddp_bucket_cap_mb));
  if (a.ddp_timeout <= 0) throw fail("ddp_timeout", "must be a positive number of seconds" + got(a.ddp_timeout));
  if (a.max_steps < -1) throw fail("max_steps", "must be a positive integer, or -1 to train for num_train_epochs" + got(a.max_steps));
  if (a.max_steps <= 0 && !(a.num_train_epochs > 0))
    throw fail("num_train_epochs", "must be positive when max_steps is not set" + got(a.num_train_epochs));
  if (!std::isfinite(a.warmup_steps) || a.warmup_steps < 0)
    throw fail("warmup_steps", "must be >= 0 (steps, or below 1 a fraction of them)" + got(a.warmup_steps));
  if (a.dataloader_num_workers < 0) throw fail("dataloader_num_workers", "must be >= 0" + got(a.dataloader_num_workers));
  if (a.save_total_limit && *a.save_total_limit < 0)
    throw fail("save_total_limit", "must be >= 0 (0 keeps every checkpoint, as in HF)" + got(*a.save_total_limit));

  // HF: a ratio of the total steps below 1, a whole number of steps above.
  auto interval = [&](const char* name, double v, bool required) {
    if (!std::isfinite(v) || v < 0 || (required && v == 0))
      throw fail(name, std::string(required ? "must be > 0" : "must be >= 0") +
                           " (a ratio of the total steps when < 1)" + got(v));
    if (v > 1 && v != std::floor(v)) throw fail(name, "must be an integer if bigger than 1" + got(v));
  };
  interval("logging_steps", a.logging_steps, a.logging_strategy == "steps");
  // 0 (or unset): logging_steps, as HF; evaluating every "steps" needs a positive interval.
  const double eval_every = a.eval_steps && *a.eval_steps != 0 ? *a.eval_steps : a.logging_steps;
  if (a.eval_steps || a.eval_strategy == "steps") interval("eval_steps", eval_every, a.eval_strategy == "steps");
  if (!std::isfinite(a.eval_delay) || a.eval_delay < 0)
    throw fail("eval_delay", "must be >= 0 (steps or epochs before the first evaluation)" + got(a.eval_delay));
  if (a.eval_accumulation_steps) positive_int("eval_accumulation_steps", *a.eval_accumulation_steps);
  if (a.generation_max_length) positive_int("generation_max_length", *a.generation_max_length);
  if (a.generation_num_beams) positive_int("generation_num_beams", *a.generation_num_beams);
  if (a.fp16)
    throw fail("fp16", "is not supported: kiln's mixed precision is bf16 (--bf16), which needs no loss scaling");
  if (a.use_cpu && a.device.rfind("cuda", 0) == 0)
    throw fail("use_cpu", "asks for the CPU, but device is '" + a.device + "'");
  if (a.early_stopping_patience) {
    positive_int("early_stopping_patience", *a.early_stopping_patience);
    // HF's EarlyStoppingCallback asserts the first two; it compares with the best metric of the checkpoints
    // saved so far, which never exists without saves, so it would silently never stop.
    if (!a.metric_for_best_model)
      throw fail("early_stopping_patience", "needs --metric_for_best_model (or --load_best_model_at_end)");
    if (a.eval_strategy == "no") throw fail("early_stopping_patience", "needs evaluations, but eval_strategy is 'no'");
    if (a.save_strategy == "no")
      throw fail("early_stopping_patience", "compares each evaluation with the best saved checkpoint's metric, "
                                            "but save_strategy is 'no'");
  }
  in_range("early_stopping_threshold", a.early_stopping_threshold, 0, inf, false, "[0, inf)");
  interval("save_steps", a.save_steps, a.save_strategy == "steps");
  // lr_scheduler_kwargs: numbers, with the names the schedule takes (checked by building it, as HF does at the
  // first step; a throwaway total of 1 step).
  if (a.lr_scheduler_type == "reduce_lr_on_plateau") {  // torch's keyword arguments, strings among them
    if (a.eval_strategy == "no")
      throw fail("lr_scheduler_type", "reduce_lr_on_plateau lowers the rate after evaluations that do not improve, "
                                      "so it needs an eval_strategy (HF: 'requires an eval strategy')");
    try {
      (void)optim::ReduceLROnPlateau::parse(a.lr_scheduler_kwargs);
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
  } else {
    optim::LRSchedule::Kwargs kwargs;
    for (const auto& [k, v] : a.lr_scheduler_kwargs.items()) {
      if (!v.is_number() || v.is_boolean())
        throw fail("lr_scheduler_kwargs", "'" + k + "' must be a number, got " + json_found(v));
      kwargs[k] = v.get<double>();
    }
    try {
      (void)optim::LRSchedule(a.lr_scheduler_type, a.learning_rate, 0, a.lr_scheduler_type == "polynomial" ? 1 : 0,
                              kwargs);
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
  }
  if (!a.save_safetensors)
    throw fail("save_safetensors", "must be true: kiln writes model.safetensors only (no pytorch_model.bin)");
  if (a.push_to_hub) throw fail("push_to_hub", "is not supported: kiln never uses the network");
  if (a.metric_for_best_model && a.metric_for_best_model->empty())
    throw fail("metric_for_best_model", "must not be empty");
  try {
    (void)Device::parse(a.device);
  } catch (const Error&) {
    throw fail("device", "must be cpu, cpu:N, cuda or cuda:N; got '" + a.device + "'");
  }
  if (a.tf32 && Device::parse(a.device).kind != DeviceKind::CUDA)
    throw fail("tf32", "requires a CUDA device (--device cuda), but device is '" + a.device + "'");

  if (a.load_best_model_at_end) {
    if (a.eval_strategy != a.save_strategy)
      throw Error(where + dash + "load_best_model_at_end requires the save and eval strategy to match, but found " +
                  "eval_strategy '" + a.eval_strategy + "' and save_strategy '" + a.save_strategy + "'");
    if (a.eval_strategy == "no")
      throw Error(where + dash + "load_best_model_at_end needs evaluations, but eval_strategy is 'no'");
    if (a.eval_strategy == "steps") {
      double eval = eval_every, save = a.save_steps;
      bool eval_ratio = eval < 1, save_ratio = save < 1;
      if (eval_ratio != save_ratio)
        throw Error(where + dash + "load_best_model_at_end requires save_steps to be a multiple of eval_steps, " +
                    "which cannot be guaranteed when mixing a ratio and absolute steps (save_steps " +
                    json(save).dump() + ", eval_steps " + json(eval).dump() + ")");
      // Ratios compared in millionths, as HF does, to stay clear of rounding.
      double scale = eval_ratio ? 1e6 : 1;
      if (std::llround(save * scale) % std::llround(eval * scale) != 0)
        throw Error(where + dash + "load_best_model_at_end requires save_steps to be a round multiple of " +
                    "eval_steps, but found save_steps " + json(save).dump() + " and eval_steps " + json(eval).dump());
    }
  }
}

void finish(TA& a, const std::string& where, const std::string& dash) {
  a.resolve_defaults();
  check(a, where, dash);
}

std::string normalized_flag(std::string name) {
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace

std::optional<bool> parse_bool_word(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "true" || v == "1" || v == "yes" || v == "t" || v == "y") return true;
  if (v == "false" || v == "0" || v == "no" || v == "f" || v == "n") return false;
  return std::nullopt;
}

std::string closest_name(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::string::npos;
  const size_t limit = std::max<size_t>(2, word.size() / 3);
  for (const auto& c : candidates) {
    // The distance is at least the difference in length: a candidate that
    // cannot be close costs nothing (nor does a word pages long).
    if (std::max(word.size(), c.size()) - std::min(word.size(), c.size()) > limit) continue;
    // Levenshtein distance, one row at a time.
    std::vector<size_t> prev(c.size() + 1), cur(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= word.size(); ++i) {
      cur[0] = i;
      for (size_t j = 1; j <= c.size(); ++j)
        cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (word[i - 1] == c[j - 1] ? 0 : 1)});
      std::swap(prev, cur);
    }
    if (prev[c.size()] < best_distance) {
      best_distance = prev[c.size()];
      best = c;
    }
  }
  return best_distance <= limit ? best : "";
}

const std::vector<std::string>& TrainingArguments::field_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& f : fields()) n.push_back(f.name);
    return n;
  }();
  return names;
}

TrainingArguments TrainingArguments::parse(const std::vector<std::string>& args,
                                           std::map<std::string, std::string>* rest,
                                           const std::vector<std::string>& known_extra_flags,
                                           const std::vector<std::string>& known_extra_switches) {
  TrainingArguments a;
  auto find_extra = [&](const std::vector<std::string>& names, const std::string& name) -> const std::string* {
    if (!rest) return nullptr;
    for (const auto& n : names)
      if (n == name || normalized_flag(n) == normalized_flag(name)) return &n;
    return nullptr;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    KILN_CHECK(arg.size() > 2 && arg.rfind("--", 0) == 0, "unexpected argument '", arg,
               "' (flags are written --name value or --name=value)");
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const std::string flag = "--" + name;
    bool has_next = i + 1 < args.size();
    // A bool takes the next argument only when it is a bool word, so "--do_train --do_eval" works; anything else
    // that is not a flag is a mistake worth reporting ("--do_train train.csv").
    auto switch_value = [&]() -> std::string {
      if (value) return *value;
      if (!has_next || args[i + 1].rfind("--", 0) == 0) return "true";
      return args[++i];
    };
    auto flag_value = [&]() -> std::string {
      if (value) return *value;
      KILN_CHECK(has_next && args[i + 1].rfind("--", 0) != 0, "flag ", flag, " needs a value");
      return args[++i];
    };

    if (const std::string key = normalized_flag(name);
        key == "include_num_input_tokens_seen" || key == "train_sampling_strategy") {
      // transformers 5's spellings ("all" / "no"; train_sampling_strategy for group_by_length) beside kiln's bool.
      const std::string v = key == "train_sampling_strategy" ? flag_value() : switch_value();
      if (key != "train_sampling_strategy" && parse_bool_word(v)) {
        set_from_text(a, *find_field(key), v, flag);
        continue;
      }
      const auto kiln_form = translate_hf_field(key, json(v), flag);
      set_from_text(a, *find_field(kiln_form->first), kiln_form->second.get<bool>() ? "true" : "false", flag);
    } else if (const Field* f = find_field(normalized_flag(name))) {
      set_from_text(a, *f, is_bool_field(*f) ? switch_value() : flag_value(), flag);
    } else if (const std::string* extra = find_extra(known_extra_flags, name)) {
      (*rest)[*extra] = flag_value();
    } else if (const std::string* sw = find_extra(known_extra_switches, name)) {
      std::string v = switch_value();
      auto b = parse_bool_word(v);
      KILN_CHECK(b, flag, ": invalid value '", v, "' (expected true, false, 1 or 0, or no value)");
      (*rest)[*sw] = *b ? "true" : "false";
    } else {
      std::vector<std::string> candidates = field_names();
      if (rest) {
        candidates.insert(candidates.end(), known_extra_flags.begin(), known_extra_flags.end());
        candidates.insert(candidates.end(), known_extra_switches.begin(), known_extra_switches.end());
      }
      std::string near = closest_name(normalized_flag(name), candidates);
      throw Error("unknown flag '" + flag + "'" + (near.empty() ? "" : " (did you mean --" + near + "?)"));
    }
  }
  finish(a, "", "--");
  return a;
}

TrainingArguments TrainingArguments::from_json(const nlohmann::json& j, const std::string& source) {
  KILN_CHECK(j.is_object(), source, ": expected a JSON object of TrainingArguments fields, found ", j.type_name());
  TrainingArguments a;
  std::vector<std::string> unknown;
  for (const auto& [key, value] : j.items()) {
    const Field* f = find_field(key);
    if (!f) {
      std::string near = closest_name(key, field_names());
      unknown.push_back("'" + key + "'" + (near.empty() ? "" : " (did you mean '" + near + "'?)"));
      continue;
    }
    // HF writes "evaluation_strategy": null next to eval_strategy; a value overrides eval_strategy (HF).
    if (key == kEvalStrategyAlias && value.is_null()) continue;
    if (key == kUseCpuAlias && value == false) continue;  // HF writes no_cuda: false next to use_cpu
    if (key == "report_to" && (value.is_array() || value.is_null())) {  // HF writes a list; null is "none"
      std::vector<std::string> names;
      for (const auto& n : value.is_null() ? json::array() : value) {
        KILN_CHECK(n.is_string(), source, ": key 'report_to': expected a list of strings, found ", json_found(n));
        names.push_back(n.get<std::string>());
      }
      a.report_to = names.empty() ? "none" : joined(names);
      continue;
    }
    set_from_json(a, *f, value, source + ": key '" + key + "'");
  }
  if (!unknown.empty())
    throw Error(source + ": unknown TrainingArguments key" + (unknown.size() > 1 ? "s " : " ") + joined(unknown));
  finish(a, source + ": ", "");
  return a;
}

TrainingArguments TrainingArguments::from_json_file(const std::filesystem::path& path) {
  return from_json(read_json_file(path), path.string());
}

nlohmann::json TrainingArguments::to_json() const {
  json j = json::object();
  for (const auto& f : fields()) {
    std::visit(
        [&](auto member) {
          const auto& v = this->*member;
          using M = std::remove_cvref_t<decltype(v)>;
          if constexpr (std::is_same_v<M, std::string> || std::is_same_v<M, bool> || std::is_same_v<M, int64_t> ||
                        std::is_same_v<M, uint64_t> || std::is_same_v<M, double> || std::is_same_v<M, json>) {
            j[f.name] = v;
          } else {
            j[f.name] = v ? json(*v) : json(nullptr);
          }
        },
        f.member);
  }
  return j;
}

void TrainingArguments::resolve_defaults() {
  if (!do_eval && eval_strategy != "no") do_eval = true;
  // HF's Trainer.train(resume_from_checkpoint=True): the output directory's last checkpoint (a directory of that
  // name, should one exist, is still a directory).
  if (auto b = parse_bool_word(resume_from_checkpoint); b && !std::filesystem::is_directory(resume_from_checkpoint))
    resume_from_checkpoint = *b ? "latest" : "";
  // HF copies logging_steps (a ratio too) into eval_steps.
  if (eval_strategy == "steps" && (!eval_steps || *eval_steps == 0)) eval_steps = logging_steps;
  if ((load_best_model_at_end || lr_scheduler_type == "reduce_lr_on_plateau") && !metric_for_best_model)
    metric_for_best_model = "loss";
  if (!greater_is_better && metric_for_best_model) {
    const std::string& m = *metric_for_best_model;
    greater_is_better = !(m.size() >= 4 && m.compare(m.size() - 4, 4, "loss") == 0);
  }
}

void TrainingArguments::validate() const { check(*this, "", ""); }

bool TrainingArguments::reports_to(const std::string& integration) const {
  for (const auto& name : report_to_names(report_to))
    if (name == integration || name == "all") return true;
  return false;
}

int64_t TrainingArguments::num_warmup_steps(int64_t total_steps) const {
  if (warmup_steps > 0) return steps_from_ratio(warmup_steps, total_steps);  // transformers 5's get_warmup_steps
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

int64_t TrainingArguments::steps_from_ratio(double v, int64_t total_steps) const {
  if (v < 1) return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * v));
  return static_cast<int64_t>(v);
}

std::map<std::string, double> TrainingArguments::schedule_kwargs() const {
  std::map<std::string, double> out;
  if (lr_scheduler_type == "reduce_lr_on_plateau") return out;  // ReduceLROnPlateau::parse reads them
  for (const auto& [k, v] : lr_scheduler_kwargs.items()) out[k] = v.get<double>();
  return out;
}

int64_t TrainingArguments::eval_interval(int64_t total_steps) const {
  return steps_from_ratio(eval_steps && *eval_steps > 0 ? *eval_steps : logging_steps, total_steps);
}

std::string TrainingArguments::help() {
  static const char* kinds[] = {"STR", "", "INT", "UINT", "FLOAT", "INT", "UINT", "STR", "", "JSON", "FLOAT"};
  json defaults = TrainingArguments{}.to_json();
  std::string out;
  for (const auto& f : fields()) {
    std::string kind = f.choices.empty() ? kinds[f.member.index()] : "{" + joined(f.choices) + "}";
    out += "  --" + f.name + (kind.empty() ? "" : " " + kind);
    if (!defaults[f.name].is_null())
      out += "  (default: " + defaults[f.name].dump() + ")";
    out += "\n";
  }
  return out;
}

}  // namespace kiln::train
