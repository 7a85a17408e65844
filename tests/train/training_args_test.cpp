// TrainingArguments: HF's defaults, every flag, bool forms, the
// evaluation_strategy alias, value errors that name the flag, suggestions,
// extra flags for the caller, and JSON (training_args.json) round trips.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/optim/schedule.h"
#include "kiln/train/training_args.h"
#include "support/test_util.h"

namespace kiln::train {
namespace {

using json = nlohmann::json;
using Args = std::vector<std::string>;

TrainingArguments parse(Args args) { return TrainingArguments::parse(args, nullptr, {}, {}); }

using kiln::testing::error_of;

std::string parse_error(Args args) {
  return error_of([&] { parse(args); });
}

#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// transformers 4.40's defaults, as TrainingArguments(output_dir="out").to_dict() has them.
const json kHfDefaults = {
    {"output_dir", "out"},
    {"overwrite_output_dir", false},
    {"do_train", false},
    {"do_eval", false},
    {"do_predict", false},
    {"eval_strategy", "no"},
    {"eval_steps", nullptr},
    {"per_device_train_batch_size", 8},
    {"per_device_eval_batch_size", 8},
    {"gradient_accumulation_steps", 1},
    {"learning_rate", 5e-5},
    {"weight_decay", 0.0},
    {"adam_beta1", 0.9},
    {"adam_beta2", 0.999},
    {"adam_epsilon", 1e-8},
    {"max_grad_norm", 1.0},
    {"num_train_epochs", 3.0},
    {"max_steps", -1},
    {"lr_scheduler_type", "linear"},
    {"lr_scheduler_kwargs", json::object()},
    {"warmup_ratio", 0.0},
    {"warmup_steps", 0},
    {"logging_strategy", "steps"},
    {"logging_steps", 500},
    {"logging_first_step", false},
    {"logging_nan_inf_filter", true},
    {"eval_delay", 0},
    {"eval_on_start", false},
    {"eval_accumulation_steps", nullptr},
    {"save_strategy", "steps"},
    {"save_steps", 500},
    {"save_total_limit", nullptr},
    {"save_only_model", false},
    {"seed", 42},
    {"data_seed", nullptr},
    {"dataloader_drop_last", false},
    {"dataloader_num_workers", 0},
    {"group_by_length", false},
    {"load_best_model_at_end", false},
    {"metric_for_best_model", nullptr},
    {"greater_is_better", nullptr},
    {"resume_from_checkpoint", ""},
    {"ignore_data_skip", false},
    {"label_smoothing_factor", 0.0},
    {"gradient_checkpointing", false},
    {"tf32", false},
    {"bf16", false},
    {"fp16", false},
    {"use_cpu", false},
    {"include_num_input_tokens_seen", false},
    {"ddp_bucket_cap_mb", 25.0},
    {"ddp_timeout", 1800},
    {"report_to", "none"},  // transformers 5's default (4.40: "all", every installed integration)
    {"logging_dir", nullptr},
    {"run_name", nullptr},
    {"disable_tqdm", nullptr},
    {"optim", "adamw_torch"},
    {"save_safetensors", true},
    {"push_to_hub", false},
    {"predict_with_generate", false},
    {"generation_max_length", nullptr},
    {"generation_num_beams", nullptr},
    {"num_replicas", 1},
    {"shard_optimizer_state", false},
    {"metrics_debug", false},
    {"device", "cpu"},
    // kiln's flags for HF's EarlyStoppingCallback
    {"early_stopping_patience", nullptr},
    {"early_stopping_threshold", 0.0},
};

// A non-default value for every field: the flag text and what to_json() then holds.
struct FlagCase {
  std::string name, text;
  json expected;
  bool only_default = false;  // kiln accepts only HF's default (save_safetensors, push_to_hub, fp16)
  bool alone = false;         // conflicts with another case's value (use_cpu with device cuda:1)
};
const std::vector<FlagCase> kEveryFlag = {
    {"output_dir", "runs/a b", "runs/a b"},
    {"overwrite_output_dir", "", true},
    {"do_train", "", true},
    {"do_eval", "", true},
    {"do_predict", "", true},
    {"eval_strategy", "epoch", "epoch"},
    {"eval_steps", "250", 250},
    {"per_device_train_batch_size", "16", 16},
    {"per_device_eval_batch_size", "32", 32},
    {"gradient_accumulation_steps", "4", 4},
    {"learning_rate", "3e-4", 3e-4},
    {"weight_decay", "0.01", 0.01},
    {"adam_beta1", "0.8", 0.8},
    {"adam_beta2", "0.98", 0.98},
    {"adam_epsilon", "1e-6", 1e-6},
    {"max_grad_norm", "0.5", 0.5},
    {"num_train_epochs", "2.5", 2.5},
    {"max_steps", "1000", 1000},
    {"lr_scheduler_type", "cosine", "cosine"},
    {"lr_scheduler_kwargs", R"({"num_cycles": 2})", {{"num_cycles", 2}}},
    {"warmup_ratio", "0.1", 0.1},
    {"warmup_steps", "50", 50},
    {"logging_strategy", "epoch", "epoch"},
    {"logging_steps", "0.05", 0.05},
    {"logging_first_step", "", true},
    {"logging_nan_inf_filter", "false", false},
    {"eval_delay", "2", 2.0},
    {"eval_on_start", "", true},
    {"eval_accumulation_steps", "4", 4},
    {"save_strategy", "epoch", "epoch"},
    {"save_steps", "0.25", 0.25},
    {"save_total_limit", "2", 2},
    {"save_only_model", "", true},
    {"seed", "18446744073709551615", UINT64_MAX},
    {"data_seed", "7", 7},
    {"dataloader_drop_last", "", true},
    {"dataloader_num_workers", "3", 3},
    {"group_by_length", "", true},
    {"load_best_model_at_end", "", true},
    {"metric_for_best_model", "accuracy", "accuracy"},
    {"greater_is_better", "false", false},
    {"resume_from_checkpoint", "latest", "latest"},
    {"ignore_data_skip", "", true},
    {"label_smoothing_factor", "0.1", 0.1},
    {"gradient_checkpointing", "", true},
    {"tf32", "", true},
    {"bf16", "", true},
    {"fp16", "false", false, true},
    {"use_cpu", "", true, false, true},
    {"include_num_input_tokens_seen", "", true},
    {"ddp_bucket_cap_mb", "0.5", 0.5},
    {"ddp_timeout", "60", 60},
    {"report_to", "tensorboard", "tensorboard"},
    {"logging_dir", "logs/run1", "logs/run1"},
    {"run_name", "first", "first"},
    {"disable_tqdm", "true", true},
    {"optim", "adamw_torch_fused", "adamw_torch_fused"},
    {"save_safetensors", "true", true, true},
    {"push_to_hub", "false", false, true},
    {"predict_with_generate", "", true},
    {"generation_max_length", "64", 64},
    {"generation_num_beams", "1", 1},
    {"num_replicas", "2", 2},
    {"shard_optimizer_state", "", true},
    {"metrics_debug", "", true},
    {"device", "cuda:1", "cuda:1"},
    {"early_stopping_patience", "3", 3},
    {"early_stopping_threshold", "0.01", 0.01},
};

Args with_flag(const FlagCase& c) {
  Args args;
  if (c.name != "output_dir") args = {"--output_dir", "o"};
  args.push_back("--" + c.name);
  if (!c.text.empty()) args.push_back(c.text);
  return args;
}

TEST(TrainingArgs, DefaultsAreHuggingFaces) {
  TrainingArguments a = parse({"--output_dir", "out"});
  EXPECT_EQ(a.to_json(), kHfDefaults);
  EXPECT_EQ(a.train_batch_size(), 8);
  TrainingArguments plain;
  plain.output_dir = "out";
  EXPECT_EQ(plain, a);  // parse changes nothing it was not asked to
  EXPECT_EQ(plain.to_json().size(), TrainingArguments::field_names().size());
}

TEST(TrainingArgs, EveryFlagSetsItsField) {
  std::vector<std::string> covered;
  for (const auto& c : kEveryFlag) covered.push_back(c.name);
  ASSERT_EQ(covered, TrainingArguments::field_names()) << "a field without a flag test";
  for (const auto& c : kEveryFlag) {
    Args args = with_flag(c);
    // load_best_model_at_end needs evaluations at the save points.
    if (c.name == "load_best_model_at_end")
      args.insert(args.end(), {"--eval_strategy", "epoch", "--save_strategy", "epoch"});
    if (c.name == "tf32") args.insert(args.end(), {"--device", "cuda"});  // TF32 is a CUDA mode
    if (c.name == "lr_scheduler_kwargs") args.insert(args.end(), {"--lr_scheduler_type", "cosine"});
    if (c.name == "early_stopping_patience")  // compares evaluations with saved checkpoints' metric
      args.insert(args.end(), {"--metric_for_best_model", "accuracy", "--eval_strategy", "epoch"});
    json j = parse(args).to_json();
    EXPECT_EQ(j[c.name], c.expected) << c.name;
    if (!c.only_default) {
      EXPECT_NE(j[c.name], kHfDefaults[c.name]) << c.name << ": the test value must differ from the default";
    }
    // The --name=value form sets the same.
    if (!c.text.empty()) {
      Args eq = args;
      auto it = std::find(eq.begin(), eq.end(), "--" + c.name);
      *it += "=" + *(it + 1);
      eq.erase(it + 1);
      EXPECT_EQ(parse(eq).to_json()[c.name], c.expected) << c.name;
    }
  }
}

TEST(TrainingArgs, AllFlagsRoundTripThroughJson) {
  Args args;
  for (const auto& c : kEveryFlag) {
    if (c.alone) continue;
    args.push_back("--" + c.name);
    if (!c.text.empty()) args.push_back(c.text);
  }
  TrainingArguments a = parse(args);
  json j = a.to_json();
  for (const auto& c : kEveryFlag)
    if (!c.alone) {
      EXPECT_EQ(j[c.name], c.expected) << c.name;
    }
  TrainingArguments back = TrainingArguments::from_json(j, "training_args.json");
  EXPECT_EQ(back, a);
  EXPECT_EQ(back.to_json(), j);
  // Through text too, as a checkpoint stores it.
  EXPECT_EQ(TrainingArguments::from_json(json::parse(j.dump(2)), "training_args.json"), a);
}

TEST(TrainingArgs, BoolForms) {
  auto do_train = [](Args extra) {
    Args args{"--output_dir", "o"};
    args.insert(args.end(), extra.begin(), extra.end());
    return parse(args).do_train;
  };
  EXPECT_TRUE(do_train({"--do_train"}));
  EXPECT_TRUE(do_train({"--do_train", "true"}));
  EXPECT_TRUE(do_train({"--do_train", "1"}));
  EXPECT_TRUE(do_train({"--do_train=True"}));
  EXPECT_TRUE(do_train({"--do_train", "yes"}));  // HF's string_to_bool words
  EXPECT_FALSE(do_train({"--do_train", "false"}));
  EXPECT_FALSE(do_train({"--do_train", "0"}));
  EXPECT_FALSE(do_train({"--do_train=false"}));
  EXPECT_FALSE(do_train({"--do_train", "true", "--do_train", "false"}));  // last one wins, as argparse
  TrainingArguments both = parse({"--do_train", "--do_eval", "--output_dir", "o"});
  EXPECT_TRUE(both.do_train && both.do_eval);
  EXPECT_EQ(parse({"--output_dir", "o", "--greater_is_better"}).greater_is_better, true);
  EXPECT_EQ(parse({"--output_dir", "o", "--greater_is_better", "0"}).greater_is_better, false);

  std::string e = parse_error({"--output_dir", "o", "--do_train", "maybe"});
  EXPECT_HAS(e, "--do_train");
  EXPECT_HAS(e, "'maybe'");
  EXPECT_HAS(e, "true, false, 1 or 0");
  EXPECT_HAS(parse_error({"--do_train", "train.csv", "--output_dir", "o"}), "'train.csv'");
}

TEST(TrainingArgs, DashedSpellingsAsHfArgumentParser) {
  TrainingArguments a = parse({"--output-dir", "o", "--per-device-train-batch-size", "4", "--do-train"});
  EXPECT_EQ(a.per_device_train_batch_size, 4);
  EXPECT_TRUE(a.do_train);
}

TEST(TrainingArgs, EvaluationStrategyAlias) {
  TrainingArguments a = parse({"--output_dir", "o", "--evaluation_strategy", "steps"});
  EXPECT_EQ(a.eval_strategy, "steps");
  EXPECT_TRUE(a.do_eval);  // HF's __post_init__
  EXPECT_EQ(a.eval_steps, 500);  // = logging_steps
  EXPECT_EQ(a.to_json().count("evaluation_strategy"), 0u);
  EXPECT_EQ(parse({"--output_dir", "o", "--evaluation_strategy=epoch"}).eval_strategy, "epoch");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--evaluation_strategy", "often"}), "--evaluation_strategy");

  json j = {{"output_dir", "o"}, {"eval_strategy", "no"}, {"evaluation_strategy", "epoch"}};
  EXPECT_EQ(TrainingArguments::from_json(j, "a.json").eval_strategy, "epoch");  // HF: the old name overrides
  j["evaluation_strategy"] = nullptr;  // as HF 4.40 writes it
  EXPECT_EQ(TrainingArguments::from_json(j, "a.json").eval_strategy, "no");
}

TEST(TrainingArgs, UseCpuAndItsOldName) {
  EXPECT_TRUE(parse({"--output_dir", "o", "--use_cpu"}).use_cpu);
  EXPECT_TRUE(parse({"--output_dir", "o", "--no_cuda"}).use_cpu);  // HF's deprecated name
  EXPECT_EQ(parse({"--output_dir", "o", "--no_cuda"}).to_json().count("no_cuda"), 0u);
  EXPECT_HAS(parse_error({"--output_dir", "o", "--use_cpu", "--device", "cuda"}),
             "--use_cpu asks for the CPU, but device is 'cuda'");
  json j = {{"output_dir", "o"}, {"no_cuda", false}, {"use_cpu", true}};  // HF writes both
  EXPECT_TRUE(TrainingArguments::from_json(j, "a.json").use_cpu);
  j = {{"output_dir", "o"}, {"no_cuda", true}};
  EXPECT_TRUE(TrainingArguments::from_json(j, "a.json").use_cpu);
}

TEST(TrainingArgs, LrSchedulerKwargs) {
  TrainingArguments a = parse({"--output_dir", "o", "--lr_scheduler_type", "polynomial", "--lr_scheduler_kwargs",
                               R"({"lr_end": 1e-6, "power": 2})"});
  EXPECT_EQ(a.schedule_kwargs(), (std::map<std::string, double>{{"lr_end", 1e-6}, {"power", 2.0}}));
  // JSON: an object, its text (HF accepts a str and json.loads it) or null for {}.
  json j = {{"output_dir", "o"}, {"lr_scheduler_type", "cosine_with_min_lr"},
            {"lr_scheduler_kwargs", {{"min_lr_rate", 0.1}}}};
  EXPECT_EQ(TrainingArguments::from_json(j, "a.json").schedule_kwargs().at("min_lr_rate"), 0.1);
  j["lr_scheduler_kwargs"] = R"({"min_lr": 1e-6})";
  EXPECT_EQ(TrainingArguments::from_json(j, "a.json").schedule_kwargs().at("min_lr"), 1e-6);
  j["lr_scheduler_type"] = "linear";
  j["lr_scheduler_kwargs"] = nullptr;
  EXPECT_TRUE(TrainingArguments::from_json(j, "a.json").schedule_kwargs().empty());
  // Errors name the flag or file and key.
  EXPECT_HAS(parse_error({"--output_dir", "o", "--lr_scheduler_kwargs", "num_cycles=2"}),
             "--lr_scheduler_kwargs: invalid value 'num_cycles=2' (expected a JSON object");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--lr_scheduler_kwargs", "[2]"}), "expected a JSON object");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--lr_scheduler_type", "cosine", "--lr_scheduler_kwargs",
                          R"({"num_cycles": "two"})"}),
             "--lr_scheduler_kwargs 'num_cycles' must be a number, got string \"two\"");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--lr_scheduler_kwargs", R"({"num_cycles": 2})"}),
             "lr schedule 'linear' takes no keyword arguments; got 'num_cycles'");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--lr_scheduler_type", "cosine_with_min_lr"}),
             "needs min_lr or min_lr_rate");
  j = {{"output_dir", "o"}, {"lr_scheduler_type", "cosine"}, {"lr_scheduler_kwargs", {{"num_cycle", 2}}}};
  EXPECT_HAS(error_of([&] { TrainingArguments::from_json(j, "a.json"); }),
             "a.json: lr_scheduler_kwargs: lr schedule 'cosine' takes only num_cycles; got 'num_cycle'");
  // Schedules HF builds without them take any (the trainer warns).
  EXPECT_NO_THROW(parse({"--output_dir", "o", "--lr_scheduler_type", "constant", "--lr_scheduler_kwargs", R"({"x": 1})"}));
}

// reduce_lr_on_plateau: torch's keyword arguments (strings among them), an
// eval strategy required and metric_for_best_model defaulting to loss, as in
// HF's __post_init__.
TEST(TrainingArgs, ReduceLROnPlateau) {
  TrainingArguments a = parse({"--output_dir", "o", "--eval_strategy", "epoch", "--lr_scheduler_type",
                               "reduce_lr_on_plateau", "--lr_scheduler_kwargs",
                               R"({"mode": "max", "patience": 2, "factor": 0.5})"});
  EXPECT_EQ(a.metric_for_best_model, "loss");
  EXPECT_EQ(a.greater_is_better, false);
  EXPECT_TRUE(a.schedule_kwargs().empty());  // the plateau reads lr_scheduler_kwargs itself
  EXPECT_EQ(optim::ReduceLROnPlateau::parse(a.lr_scheduler_kwargs).mode, "max");
  EXPECT_EQ(parse({"--output_dir", "o", "--eval_strategy", "steps", "--lr_scheduler_type", "reduce_lr_on_plateau",
                   "--metric_for_best_model", "accuracy"})
                .metric_for_best_model,
            "accuracy");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--lr_scheduler_type", "reduce_lr_on_plateau"}),
             "--lr_scheduler_type reduce_lr_on_plateau lowers the rate after evaluations that do not improve, so it "
             "needs an eval_strategy");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--eval_strategy", "epoch", "--lr_scheduler_type",
                          "reduce_lr_on_plateau", "--lr_scheduler_kwargs", R"({"patience": "ten"})"}),
             "lr_scheduler_kwargs: lr schedule 'reduce_lr_on_plateau': 'patience' must be a whole number >= 0, got "
             "\"ten\"");
}

TEST(TrainingArgs, FlowFieldRules) {
  // logging_steps may be 0 when logging is not by steps (HF's rule).
  EXPECT_NO_THROW(parse({"--output_dir", "o", "--logging_strategy", "epoch", "--logging_steps", "0"}));
  EXPECT_HAS(parse_error({"--output_dir", "o", "--logging_steps", "0"}), "--logging_steps must be > 0");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--logging_strategy", "often"}), "no, steps, epoch");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--eval_delay", "-1"}), "--eval_delay must be >= 0");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--eval_accumulation_steps", "0"}),
             "--eval_accumulation_steps must be a positive integer");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--fp16"}), "--fp16 is not supported: kiln's mixed precision is bf16");
  EXPECT_FALSE(parse({"--output_dir", "o", "--fp16", "false"}).fp16);
  EXPECT_EQ(parse({"--output_dir", "o", "--generation_num_beams", "4"}).generation_num_beams, 4);
  EXPECT_HAS(parse_error({"--output_dir", "o", "--generation_num_beams", "0"}),
             "--generation_num_beams must be a positive integer, got 0");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--generation_max_length", "0"}), "--generation_max_length must be a");
  // Early stopping: HF's callback assertions, and a save strategy so there is a best metric to compare with.
  EXPECT_HAS(parse_error({"--output_dir", "o", "--early_stopping_patience", "2", "--eval_strategy", "epoch"}),
             "--early_stopping_patience needs --metric_for_best_model");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--early_stopping_patience", "2", "--metric_for_best_model", "loss"}),
             "eval_strategy is 'no'");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--early_stopping_patience", "2", "--metric_for_best_model", "loss",
                          "--eval_strategy", "epoch", "--save_strategy", "no"}),
             "save_strategy is 'no'");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--early_stopping_patience", "0", "--load_best_model_at_end",
                          "--eval_strategy", "epoch", "--save_strategy", "epoch"}),
             "--early_stopping_patience must be a positive integer");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--early_stopping_threshold", "-0.1"}),
             "--early_stopping_threshold must be in [0, inf)");
  // load_best_model_at_end implies metric_for_best_model = loss, which is enough.
  EXPECT_NO_THROW(parse({"--output_dir", "o", "--early_stopping_patience", "2", "--load_best_model_at_end",
                         "--eval_strategy", "epoch", "--save_strategy", "epoch"}));
}

TEST(TrainingArgs, HfPostInitDefaults) {
  TrainingArguments a = parse({"--output_dir", "o", "--eval_strategy", "steps", "--logging_steps", "50"});
  EXPECT_EQ(a.eval_steps, 50);
  EXPECT_EQ(a.eval_interval(1000), 50);
  EXPECT_FALSE(a.metric_for_best_model.has_value());
  a = parse({"--output_dir", "o", "--eval_strategy", "steps", "--eval_steps", "0", "--logging_steps", "20"});
  EXPECT_EQ(a.eval_steps, 20);  // 0 means "use logging_steps" in HF
  // A ratio of logging_steps is copied as it is; eval_interval applies it.
  a = parse({"--output_dir", "o", "--eval_strategy", "steps", "--logging_steps", "0.1"});
  EXPECT_EQ(a.eval_steps, 0.1);
  EXPECT_EQ(a.eval_interval(95), 10);
  // eval_steps itself as a ratio of the total steps, as HF takes it (a float below 1, rounded up).
  a = parse({"--output_dir", "o", "--eval_strategy", "steps", "--eval_steps", "0.25"});
  EXPECT_EQ(a.eval_interval(95), 24);
  EXPECT_EQ(a.to_json()["eval_steps"], 0.25);

  a = parse({"--output_dir", "o", "--load_best_model_at_end", "--eval_strategy", "steps", "--save_steps", "1000",
             "--eval_steps", "250"});
  EXPECT_EQ(a.metric_for_best_model, "loss");
  EXPECT_EQ(a.greater_is_better, false);
  EXPECT_EQ(parse({"--output_dir", "o", "--metric_for_best_model", "eval_loss"}).greater_is_better, false);
  EXPECT_EQ(parse({"--output_dir", "o", "--metric_for_best_model", "accuracy"}).greater_is_better, true);
  EXPECT_EQ(parse({"--output_dir", "o", "--metric_for_best_model", "f1", "--greater_is_better", "false"})
                .greater_is_better,
            false);
}

TEST(TrainingArgs, BadValuesNameTheFlag) {
  std::string e = parse_error({"--output_dir", "o", "--per_device_train_batch_size", "-1"});
  EXPECT_HAS(e, "--per_device_train_batch_size");
  EXPECT_HAS(e, "positive");
  EXPECT_HAS(e, "-1");
  e = parse_error({"--output_dir", "o", "--learning_rate", "abc"});
  EXPECT_EQ(e, "--learning_rate: invalid value 'abc' (expected a number)");
  e = parse_error({"--output_dir", "o", "--eval_strategy", "sometimes"});
  EXPECT_HAS(e, "--eval_strategy");
  EXPECT_HAS(e, "'sometimes'");
  EXPECT_HAS(e, "no, steps, epoch");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--save_strategy", "step"}), "did you mean 'steps'?");
  e = parse_error({"--output_dir", "o", "--lr_scheduler_type", "cosin"});
  EXPECT_HAS(e, "linear, cosine, constant, constant_with_warmup, polynomial, cosine_with_restarts, inverse_sqrt");
  EXPECT_HAS(e, "did you mean 'cosine'?");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--seed", "-3"}), "--seed: invalid value '-3' (expected a non-negative integer)");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--max_steps", "1.5"}), "--max_steps: invalid value '1.5' (expected an integer)");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--eval_steps", "2.5"}),
             "--eval_steps must be an integer if bigger than 1");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--eval_steps", "-1"}), "--eval_steps must be >= 0");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--eval_strategy", "steps", "--logging_strategy", "no", "--logging_steps",
                          "0"}),
             "--eval_steps must be > 0");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--num_train_epochs", "nan"}), "--num_train_epochs");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--warmup_ratio", "1.5"}), "--warmup_ratio must be in [0, 1]");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--adam_beta2", "1"}), "--adam_beta2 must be in [0, 1)");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--gradient_accumulation_steps", "0"}), "--gradient_accumulation_steps");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--num_replicas", "0"}), "--num_replicas");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--logging_steps", "2.5"}), "must be an integer if bigger than 1");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--logging_steps", "0"}), "--logging_steps must be > 0");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--max_steps", "-5"}), "--max_steps");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--device", "gpu"}), "--device must be cpu, cpu:N, cuda or cuda:N");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--label_smoothing_factor", "1"}), "--label_smoothing_factor");
  EXPECT_EQ(parse_error({"--output_dir", "o", "--ddp_timeout", "0"}),
            "--ddp_timeout must be a positive number of seconds, got 0");
  EXPECT_EQ(parse_error({"--output_dir", "o", "--ddp_timeout", "-5"}),
            "--ddp_timeout must be a positive number of seconds, got -5");
  // Structure of the command line.
  // transformers 5's default directory; an empty one is an error.
  EXPECT_EQ(parse({"--do_train"}).output_dir, "trainer_output");
  EXPECT_EQ(parse_error({"--output_dir", ""}), "--output_dir must name a directory, got an empty string");
  EXPECT_EQ(parse_error({"--output_dir"}), "flag --output_dir needs a value");
  EXPECT_EQ(parse_error({"--output_dir", "--do_train"}), "flag --output_dir needs a value");
  EXPECT_HAS(parse_error({"out", "--do_train"}), "unexpected argument 'out'");
  EXPECT_EQ(parse({"--output_dir", "o", "--max_steps", "-1"}).max_steps, -1);  // negative numbers are values
}

TEST(TrainingArgs, Tf32NeedsACudaDevice) {
  EXPECT_EQ(parse_error({"--output_dir", "o", "--tf32"}),
            "--tf32 requires a CUDA device (--device cuda), but device is 'cpu'");
  EXPECT_TRUE(parse({"--output_dir", "o", "--tf32", "--device", "cuda:0"}).tf32);  // parsing needs no GPU
}

TEST(TrainingArgs, LoadBestModelRules) {
  std::string e = parse_error({"--output_dir", "o", "--load_best_model_at_end", "--eval_strategy", "epoch"});
  EXPECT_HAS(e, "load_best_model_at_end requires the save and eval strategy to match");
  EXPECT_HAS(e, "'epoch'");
  EXPECT_HAS(e, "'steps'");
  e = parse_error({"--output_dir", "o", "--load_best_model_at_end", "--eval_strategy", "steps", "--eval_steps",
                   "300", "--save_steps", "500"});
  EXPECT_HAS(e, "round multiple");
  e = parse_error({"--output_dir", "o", "--load_best_model_at_end", "--eval_strategy", "steps", "--logging_steps",
                   "0.1", "--save_steps", "500"});
  EXPECT_HAS(e, "mixing a ratio and absolute steps");
  // Ratios that are multiples are fine, as in HF.
  TrainingArguments a = parse({"--output_dir", "o", "--load_best_model_at_end", "--eval_strategy", "steps",
                               "--logging_steps", "0.1", "--save_steps", "0.2"});
  EXPECT_TRUE(a.load_best_model_at_end);
  EXPECT_HAS(parse_error({"--output_dir", "o", "--load_best_model_at_end", "--save_strategy", "no"}),
             "eval_strategy is 'no'");
}

TEST(TrainingArgs, UnknownFlagSuggestsClosest) {
  EXPECT_EQ(parse_error({"--output_dir", "o", "--learning_rat", "1e-4"}),
            "unknown flag '--learning_rat' (did you mean --learning_rate?)");
  EXPECT_EQ(parse_error({"--output_dir", "o", "--per_device_batch_size", "4"}),
            "unknown flag '--per_device_batch_size' (did you mean --per_device_eval_batch_size?)");
  EXPECT_EQ(parse_error({"--output_dir", "o", "--zzz", "1"}), "unknown flag '--zzz'");
  // Without `rest`, extra flags are unknown too.
  EXPECT_HAS(parse_error({"--output_dir", "o", "--model_name_or_path", "m"}), "unknown flag '--model_name_or_path'");
  std::map<std::string, std::string> rest;
  std::string e = error_of(
      [&] { TrainingArguments::parse({"--output_dir", "o", "--model_name_or_pat", "m"}, &rest, {"model_name_or_path"}, {}); });
  EXPECT_EQ(e, "unknown flag '--model_name_or_pat' (did you mean --model_name_or_path?)");
}

TEST(TrainingArgs, RestCollectsExtraFlags) {
  std::map<std::string, std::string> rest;
  TrainingArguments a = TrainingArguments::parse(
      {"--model_name_or_path", "bert-tiny/", "--do_train", "--task=text-classification", "--pad_to_max_length",
       "--output_dir", "o", "--max-seq-length", "128", "--no_special_tokens", "false", "--learning_rate", "1e-4"},
      &rest, {"model_name_or_path", "task", "max_seq_length", "train_file"}, {"pad_to_max_length", "no_special_tokens"});
  EXPECT_TRUE(a.do_train);
  EXPECT_EQ(a.learning_rate, 1e-4);
  EXPECT_EQ(rest, (std::map<std::string, std::string>{{"model_name_or_path", "bert-tiny/"},
                                                     {"task", "text-classification"},
                                                     {"pad_to_max_length", "true"},
                                                     {"max_seq_length", "128"},
                                                     {"no_special_tokens", "false"}}));
  std::string e = error_of([&] {
    TrainingArguments::parse({"--output_dir", "o", "--pad_to_max_length", "maybe"}, &rest, {}, {"pad_to_max_length"});
  });
  EXPECT_HAS(e, "--pad_to_max_length");
  EXPECT_HAS(e, "'maybe'");
  e = error_of([&] { TrainingArguments::parse({"--output_dir", "o", "--task"}, &rest, {"task"}, {}); });
  EXPECT_EQ(e, "flag --task needs a value");
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("kiln_args_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return path_ / name;
  }

 private:
  std::filesystem::path path_;
};

TEST(TrainingArgs, JsonErrors) {
  auto from = [](const json& j) { return error_of([&] { TrainingArguments::from_json(j, "args.json"); }); };
  EXPECT_HAS(from(json::array()), "args.json: expected a JSON object");
  EXPECT_EQ(from({{"output_dir", "o"}, {"learning_rat", 1e-4}}),
            "args.json: unknown TrainingArguments key 'learning_rat' (did you mean 'learning_rate'?)");
  EXPECT_EQ(from({{"output_dir", "o"}, {"bf61", true}, {"learning_rat", 1e-4}}),
            "args.json: unknown TrainingArguments keys 'bf61' (did you mean 'bf16'?), 'learning_rat' (did you mean "
            "'learning_rate'?)");
  EXPECT_EQ(from({{"output_dir", "o"}, {"fp16", true}}),  // kiln trains in bf16, not fp16 (no loss scaling)
            "args.json: fp16 is not supported: kiln's mixed precision is bf16 (--bf16), which needs no loss scaling");
  EXPECT_EQ(from({{"output_dir", "o"}, {"learning_rate", "abc"}}),
            "args.json: key 'learning_rate': expected a number, found string \"abc\"");
  EXPECT_HAS(from({{"output_dir", "o"}, {"seed", -1}}), "key 'seed': expected a non-negative integer");
  EXPECT_HAS(from({{"output_dir", "o"}, {"eval_steps", "0.5"}}), "key 'eval_steps': expected a number");
  EXPECT_HAS(from({{"output_dir", "o"}, {"do_train", 1}}), "key 'do_train': expected true or false");
  EXPECT_HAS(from({{"output_dir", "o"}, {"save_strategy", "often"}}), "key 'save_strategy': invalid value \"often\"");
  EXPECT_HAS(from({{"output_dir", "o"}, {"per_device_train_batch_size", 0}}),
             "args.json: per_device_train_batch_size must be a positive integer, got 0");
  EXPECT_EQ(from({{"output_dir", "o"}, {"ddp_timeout", 0}}),
            "args.json: ddp_timeout must be a positive number of seconds, got 0");
  EXPECT_EQ(from({{"output_dir", ""}}), "args.json: output_dir must name a directory, got an empty string");
  EXPECT_HAS(from({{"output_dir", "o"}, {"learning_rate", nullptr}}), "key 'learning_rate': expected a number");

  // Python writes whole floats for some integer fields; null unsets an optional one.
  TrainingArguments a = TrainingArguments::from_json(
      {{"output_dir", "o"}, {"eval_steps", 100.0}, {"save_total_limit", nullptr}, {"data_seed", 3}}, "args.json");
  EXPECT_EQ(a.eval_steps, 100);
  EXPECT_FALSE(a.save_total_limit.has_value());
  EXPECT_EQ(a.data_seed, 3u);

  TempDir dir;
  auto bad = dir.write("bad.json", "{\n  \"output_dir\": \"o\",\n  \"seed\": 4x\n}\n");
  std::string e = error_of([&] { TrainingArguments::from_json_file(bad); });
  EXPECT_HAS(e, "bad.json:3:");
  EXPECT_HAS(error_of([&] { TrainingArguments::from_json_file(dir.write("x.json", "{}") .parent_path() / "missing.json"); }),
             "missing.json");
  auto typo = dir.write("typo.json", R"({"output_dir": "o", "num_train_epoch": 2})");
  EXPECT_HAS(error_of([&] { TrainingArguments::from_json_file(typo); }),
             "typo.json: unknown TrainingArguments key 'num_train_epoch' (did you mean 'num_train_epochs'?)");
  TrainingArguments full = parse({"--output_dir", "o", "--lr_scheduler_type", "polynomial", "--seed", "9"});
  auto good = dir.write("training_args.json", full.to_json().dump(2));
  EXPECT_EQ(TrainingArguments::from_json_file(good), full);
}

// HF flags kiln accepts so HF command lines run, and the values it cannot honour.
TEST(TrainingArgs, HfIntegrationFlags) {
  EXPECT_EQ(parse_error({"--output_dir", "o", "--report_to", "wandb"}),
            "--report_to 'wandb' is not available: kiln writes only tensorboard (expected all, none, tensorboard, "
            "or a comma-separated list of them)");
  EXPECT_EQ(parse_error({"--output_dir", "o", "--optim", "adamw_bnb_8bit"}),
            "--optim: invalid value 'adamw_bnb_8bit' (expected one of: adamw_torch, adamw_torch_fused, adafactor, "
            "sgd, adagrad, rmsprop)");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--save_safetensors", "false"}),
             "--save_safetensors must be true: kiln writes model.safetensors only");
  EXPECT_HAS(parse_error({"--output_dir", "o", "--push_to_hub"}), "--push_to_hub is not supported");
}

TEST(TrainingArgs, ValidateHandBuilt) {
  TrainingArguments a;
  a.validate();  // transformers 5's default output_dir, trainer_output
  a.output_dir = "";
  EXPECT_EQ(error_of([&] { a.validate(); }), "output_dir must name a directory, got an empty string");
  a.output_dir = "o";
  a.validate();
  a.per_device_eval_batch_size = 0;
  EXPECT_EQ(error_of([&] { a.validate(); }), "per_device_eval_batch_size must be a positive integer, got 0");
  a.per_device_eval_batch_size = 8;
  a.lr_scheduler_type = "warmup_stable_decay";  // HF's, but it needs lr_scheduler_kwargs
  EXPECT_HAS(error_of([&] { a.validate(); }), "lr_scheduler_type must be one of");
}

// report_to: HF's names, a comma list on the command line, a list in JSON; only TensorBoard exists.
TEST(TrainingArgs, ReportTo) {
  EXPECT_FALSE(parse({"--output_dir", "o"}).reports_to("tensorboard"));
  EXPECT_TRUE(parse({"--output_dir", "o", "--report_to", "tensorboard"}).reports_to("tensorboard"));
  EXPECT_TRUE(parse({"--output_dir", "o", "--report_to", "all"}).reports_to("tensorboard"));
  EXPECT_TRUE(parse({"--output_dir", "o", "--report_to", "none,tensorboard"}).reports_to("tensorboard"));
  EXPECT_FALSE(parse({"--output_dir", "o", "--report_to", "none"}).reports_to("tensorboard"));
  EXPECT_HAS(parse_error({"--output_dir", "o", "--report_to", "tensorboard,mlflow"}),
             "--report_to 'mlflow' is not available: kiln writes only tensorboard");
  TrainingArguments a = TrainingArguments::from_json({{"output_dir", "o"}, {"report_to", {"tensorboard"}}}, "a.json");
  EXPECT_TRUE(a.reports_to("tensorboard"));
  EXPECT_EQ(TrainingArguments::from_json(a.to_json(), "a.json"), a);  // round trip
  EXPECT_FALSE(TrainingArguments::from_json({{"output_dir", "o"}, {"report_to", json::array()}}, "a.json")
                   .reports_to("tensorboard"));
  EXPECT_HAS(error_of([] {
               TrainingArguments::from_json({{"output_dir", "o"}, {"report_to", {"wandb"}}}, "a.json");
             }),
             "a.json: report_to 'wandb' is not available");
}

TEST(TrainingArgs, DerivedSteps) {
  TrainingArguments a = parse({"--output_dir", "o", "--warmup_ratio", "0.1", "--per_device_train_batch_size", "4",
                               "--num_replicas", "2"});
  EXPECT_EQ(a.train_batch_size(), 8);
  EXPECT_EQ(a.num_warmup_steps(95), 10);  // ceil(9.5)
  EXPECT_EQ(a.num_warmup_steps(100), 10);
  a.warmup_steps = 7;  // wins over the ratio
  EXPECT_EQ(a.num_warmup_steps(100), 7);
  // transformers 5's warmup_steps is a float: below 1 a fraction of the steps (ceil), else truncated to steps.
  a.warmup_steps = 0.25;
  EXPECT_EQ(a.num_warmup_steps(95), 24);  // ceil(23.75)
  a.warmup_steps = 2.9;
  EXPECT_EQ(a.num_warmup_steps(95), 2);
  EXPECT_EQ(a.steps_from_ratio(500, 10), 500);
  EXPECT_EQ(a.steps_from_ratio(0.05, 1000), 50);
  EXPECT_EQ(a.steps_from_ratio(0.07, 100), 8);  // math.ceil(100 * 0.07) is 8 in HF too (7.000000000000001)
  a.save_steps = 0.25;
  EXPECT_EQ(a.save_interval(10), 3);
  EXPECT_EQ(a.logging_interval(10), 500);
}

TEST(TrainingArgs, HelpListsEveryFlag) {
  std::string help = TrainingArguments::help();
  for (const auto& name : TrainingArguments::field_names()) {
    size_t at = help.find("  --" + name);
    ASSERT_NE(at, std::string::npos) << name;
    char after = help[at + 4 + name.size()];
    EXPECT_TRUE(after == ' ' || after == '\n') << name;
  }
  EXPECT_HAS(help, "--learning_rate FLOAT  (default: 5e-05)");
  EXPECT_HAS(help, "--eval_strategy {no, steps, epoch}  (default: \"no\")");
}

TEST(ClosestName, EditDistance) {
  EXPECT_EQ(closest_name("learnig_rate", {"learning_rate", "seed"}), "learning_rate");
  EXPECT_EQ(closest_name("xyz", {"learning_rate", "seed"}), "");
  EXPECT_EQ(closest_name("sed", {"learning_rate", "seed"}), "seed");
  // A key pages long (an args file's) is far from every name at once: no
  // distance table of its length times each name's is filled in.
  EXPECT_EQ(closest_name(std::string(1 << 20, 'x'), TrainingArguments::field_names()), "");
}

// transformers 5's command-line spellings: include_num_input_tokens_seen "all" / "no" (kiln counts padding, so
// "non_padding" is an error), and train_sampling_strategy for group_by_length.
TEST(TrainingArgs, TransformersFiveFlagSpellings) {
  EXPECT_TRUE(parse({"--output_dir", "o", "--include_num_input_tokens_seen", "all"}).include_num_input_tokens_seen);
  EXPECT_FALSE(parse({"--output_dir", "o", "--include_num_input_tokens_seen", "no"}).include_num_input_tokens_seen);
  EXPECT_TRUE(parse({"--output_dir", "o", "--include_num_input_tokens_seen"}).include_num_input_tokens_seen);
  EXPECT_CONTAINS(parse_error({"--output_dir", "o", "--include_num_input_tokens_seen", "non_padding"}),
                  "'non_padding' is not available");
  EXPECT_TRUE(parse({"--output_dir", "o", "--train_sampling_strategy", "group_by_length"}).group_by_length);
  EXPECT_FALSE(parse({"--output_dir", "o", "--train-sampling-strategy=random"}).group_by_length);
  EXPECT_CONTAINS(parse_error({"--output_dir", "o", "--train_sampling_strategy", "sequential"}),
                  "\"sequential\" is not available");
}

}  // namespace
}  // namespace kiln::train
