// The Trainer's flow controls, as HF's DefaultFlowCallback and Trainer have
// them: logging_strategy, logging_nan_inf_filter, eval_delay, eval_on_start,
// eval_accumulation_steps, save_only_model, include_num_input_tokens_seen,
// reduce_lr_on_plateau, and early stopping (HF's EarlyStoppingCallback).
#include <cmath>
#include <filesystem>
#include <set>

#include "kiln/io/json_file.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "support/temp_dir.h"
#include "support/test_util.h"
#include "tiny_bert.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

// 16 rows, batch 4: 4 optimizer steps an epoch.
std::shared_ptr<data::Features> rows(int n = 16) { return testing::tiny_classification_features(n); }

train::TrainingArguments args_for(const fs::path& out) {
  train::TrainingArguments a;
  a.output_dir = out.string();
  a.max_steps = 8;
  a.save_strategy = "no";
  a.logging_steps = 500;
  a.per_device_train_batch_size = 4;
  a.per_device_eval_batch_size = 4;
  a.learning_rate = 1e-3;
  a.seed = 7;
  return a;
}

data::CollatorOptions collator() {
  data::CollatorOptions c;
  c.max_length = 12;
  c.pad_to_max_length = true;  // every batch [4, 12]
  return c;
}

// Trains a fresh tiny BERT with `a` and returns trainer_state.json.
json train_with(train::TrainingArguments a, std::shared_ptr<data::Features> eval = nullptr) {
  a.resolve_defaults();
  auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
  train::Trainer t(*m, a, train::Task::TextClassification, rows(), std::move(eval), collator());
  t.train();
  return read_json_file(fs::path(a.output_dir) / "trainer_state.json");
}

// The steps of the log entries that have `key`.
std::vector<int64_t> steps_with(const json& state, const std::string& key) {
  std::vector<int64_t> out;
  for (const auto& e : state["log_history"])
    if (e.contains(key)) out.push_back(e["step"].get<int64_t>());
  return out;
}

using Steps = std::vector<int64_t>;

void evaluate_and_save_every(train::TrainingArguments& a, int64_t steps) {
  a.eval_strategy = a.save_strategy = "steps";
  a.eval_steps = steps;
  a.save_steps = steps;
}

TEST(TrainerFlow, LoggingStrategy) {
  TempDir d;
  auto a = args_for(d.path());
  a.logging_strategy = "epoch";
  EXPECT_EQ(steps_with(train_with(a), "loss"), (Steps{4, 8}));
  a.logging_strategy = "no";
  a.logging_first_step = true;  // still logs step 1, as HF
  a.overwrite_output_dir = true;
  EXPECT_EQ(steps_with(train_with(a), "loss"), (Steps{1}));
  a.logging_strategy = "steps";
  a.logging_first_step = false;
  a.logging_steps = 3;
  EXPECT_EQ(steps_with(train_with(a), "loss"), (Steps{3, 6}));
}

TEST(TrainerFlow, NanAndInfLossesAreFilteredFromTheLoggedMeanAsHf) {
  // A learning rate of 1e30 wrecks the model after the first update: the
  // following losses are NaN or inf. Logged every step without the filter,
  // each step's own loss; logged every 4 with it, HF's running substitute.
  TempDir raw_dir, filtered_dir;
  auto a = args_for(raw_dir.path());
  a.learning_rate = 1e30;
  a.max_grad_norm = 0;
  a.max_steps = 4;
  a.logging_steps = 1;
  a.logging_nan_inf_filter = false;
  json raw = train_with(a);
  std::vector<std::optional<double>> per_step;  // null: NaN or inf (JSON has neither)
  for (const auto& e : raw["log_history"])
    if (e.contains("loss")) per_step.push_back(e["loss"].is_number() ? std::optional(e["loss"].get<double>()) : std::nullopt);
  ASSERT_EQ(per_step.size(), 4u);
  ASSERT_TRUE(per_step[0].has_value());
  int non_finite = 0;
  for (auto& l : per_step) non_finite += !l.has_value();
  ASSERT_GE(non_finite, 1) << "the test needs a step with a NaN or inf loss";

  a.output_dir = filtered_dir.path().string();
  a.logging_steps = 4;
  a.logging_nan_inf_filter = true;
  json filtered = train_with(a);
  double sum = 0;
  for (size_t k = 0; k < per_step.size(); ++k) sum += per_step[k] ? *per_step[k] : sum / (k + 1);
  const json& logged = filtered["log_history"][0];
  ASSERT_TRUE(logged["loss"].is_number()) << logged;
  const double tolerance = 1e-3 + 1e-5 * std::abs(sum / 4);  // logged losses have 4 decimals
  EXPECT_NEAR(logged["loss"].get<double>(), sum / 4, tolerance);
  const json results = read_json_file(filtered_dir.path() / "train_results.json");
  EXPECT_NEAR(results["train_loss"].get<double>(), sum / 4, tolerance);
}

TEST(TrainerFlow, EvalDelayCountsStepsOrEpochs) {
  TempDir d;
  auto a = args_for(d.path());
  a.eval_strategy = "steps";
  a.eval_steps = 2;
  a.eval_delay = 5;
  EXPECT_EQ(steps_with(train_with(a, rows(8)), "eval_loss"), (Steps{6, 8}));
  a.overwrite_output_dir = true;
  a.eval_strategy = "epoch";
  a.eval_steps.reset();
  a.max_steps = 12;
  a.eval_delay = 1.5;  // epochs: the first evaluation ends epoch 2
  EXPECT_EQ(steps_with(train_with(a, rows(8)), "eval_loss"), (Steps{8, 12}));
}

TEST(TrainerFlow, EvalOnStartEvaluatesBeforeTheFirstStep) {
  TempDir d;
  auto a = args_for(d.path());
  a.eval_on_start = true;
  json state = train_with(a, rows(8));
  EXPECT_EQ(steps_with(state, "eval_loss"), (Steps{0}));
  EXPECT_TRUE(state["log_history"][0].contains("eval_loss"));
  a.overwrite_output_dir = true;
  EXPECT_CONTAINS(testing::error_of([&] { train_with(a); }), "--eval_on_start needs an evaluation set");
  a.eval_on_start = false;
  a.eval_strategy = "epoch";  // as HF's Trainer: evaluations that could never run are an error
  EXPECT_CONTAINS(testing::error_of([&] { train_with(a); }),
                  "train: eval_strategy is 'epoch' but there is no evaluation set");
}

TEST(TrainerFlow, EvalAccumulationStepsGivesTheSameMetrics) {
  TempDir d;
  auto a = args_for(d.path());
  a.per_device_eval_batch_size = 2;  // 5 batches
  auto metrics_with = [&](std::optional<int64_t> n) {
    a.eval_accumulation_steps = n;
    auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
    train::Trainer t(*m, a, train::Task::TextClassification, nullptr, rows(10), collator());
    auto out = t.evaluate();
    out.erase("eval_runtime");
    out.erase("eval_samples_per_second");
    out.erase("eval_steps_per_second");
    return out;
  };
  auto whole = metrics_with(std::nullopt);
  EXPECT_EQ(whole.at("eval_samples"), 10);
  EXPECT_EQ(metrics_with(1), whole);
  EXPECT_EQ(metrics_with(2), whole);
  EXPECT_EQ(metrics_with(7), whole);
}

TEST(TrainerFlow, SaveOnlyModelCheckpointsHoldTheModelAndRefuseToResume) {
  TempDir d;
  auto a = args_for(d.path());
  a.save_strategy = "steps";
  a.save_steps = 4;
  a.save_only_model = true;
  train_with(a);
  const fs::path ck = d.path() / "checkpoint-4";
  EXPECT_TRUE(fs::exists(ck / "model.safetensors"));
  EXPECT_TRUE(fs::exists(ck / "config.json"));
  EXPECT_TRUE(fs::exists(ck / "trainer_state.json"));
  EXPECT_FALSE(fs::exists(ck / "optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(ck / "rng_state.json"));
  a.resume_from_checkpoint = ck.string();
  EXPECT_CONTAINS(testing::error_of([&] { train_with(a); }),
                  "checkpoint-4 was saved with save_only_model: it holds the model but no optimizer state");
}

TEST(TrainerFlow, IncludeNumInputTokensSeen) {
  TempDir d;
  auto a = args_for(d.path());
  a.logging_steps = 2;
  a.include_num_input_tokens_seen = true;
  json state = train_with(a);
  EXPECT_EQ(state["num_input_tokens_seen"], 8 * 4 * 12);  // steps x rows x padded length
  for (const auto& e : state["log_history"])
    EXPECT_EQ(e["num_input_tokens_seen"], e["step"].get<int64_t>() * 4 * 12) << e;
  a.include_num_input_tokens_seen = false;
  a.overwrite_output_dir = true;
  state = train_with(a);
  EXPECT_EQ(state["num_input_tokens_seen"], 0);
  EXPECT_FALSE(state["log_history"][0].contains("num_input_tokens_seen"));
}

TEST(TrainerFlow, GroupByLengthPadsLess) {
  // Dynamic padding (no pad_to_max_length): each batch pads to its longest row.
  TempDir d;
  auto a = args_for(d.path());
  a.include_num_input_tokens_seen = true;
  a.max_steps = 16;
  auto tokens = [&](bool group) {
    a.group_by_length = group;
    a.overwrite_output_dir = true;
    auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
    data::CollatorOptions c = collator();
    c.pad_to_max_length = false;
    train::Trainer t(*m, a, train::Task::TextClassification, rows(64), nullptr, c);
    auto metrics = t.train();
    EXPECT_TRUE(std::isfinite(metrics.at("train_loss")));
    return t.state().num_input_tokens_seen;
  };
  EXPECT_LT(tokens(true), tokens(false));
}

// Resumed at step 6 (epoch 1, 2 of its 4 batches taken). Straight on, step 12
// takes the last batch of epoch 2. With ignore_data_skip epoch 1 starts again
// from its first batch, so step 12 takes batch 2 of epoch 2. The data position
// in checkpoint-12 says which happened.
TEST(TrainerFlow, IgnoreDataSkipRestartsTheEpoch) {
  for (bool ignore : {false, true}) {
    TempDir d;
    auto a = args_for(d.path());
    a.max_steps = 12;
    a.save_strategy = "steps";
    a.save_steps = 6;
    a.resolve_defaults();
    {
      auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
      train::Trainer t(*m, a, train::Task::TextClassification, rows(), nullptr, collator());
      t.stop_after_step(6);
      t.train();
    }
    a.resume_from_checkpoint = "latest";
    a.ignore_data_skip = ignore;
    train_with(a);
    const json rng = read_json_file(d.path() / "checkpoint-12" / "rng_state.json");
    EXPECT_EQ(rng["data_epoch"], 2) << ignore;
    EXPECT_EQ(rng["data_position"], ignore ? 2 : 4) << ignore;
  }
}

// lr_scheduler_type reduce_lr_on_plateau: the rate falls after evaluations
// that do not improve eval_loss (metric_for_best_model's default), from the
// step after the evaluation, and a resumed run continues with the same rate
// and plateau state. An absolute threshold of 1e9 makes every evaluation
// after the first a bad one; patience 1: steps 6 and 10 halve the rate.
TEST(TrainerFlow, ReduceLROnPlateauLowersTheRateAfterEvaluationsWithoutGain) {
  TempDir d, r;
  auto a = args_for(d.path());
  a.max_steps = 12;
  a.logging_steps = 1;
  evaluate_and_save_every(a, 2);
  a.warmup_steps = 3;  // ignored, as HF builds this schedule without warmup
  a.lr_scheduler_type = "reduce_lr_on_plateau";
  a.lr_scheduler_kwargs = {{"patience", 1}, {"factor", 0.5}, {"threshold", 1e9}, {"threshold_mode", "abs"}};
  json state = train_with(a, rows(8));
  std::map<int64_t, double> lr;
  for (const auto& e : state["log_history"])
    if (e.contains("learning_rate")) lr[e["step"]] = e["learning_rate"];
  ASSERT_EQ(lr.size(), 12u);
  for (int64_t s = 1; s <= 12; ++s) EXPECT_EQ(lr[s], s <= 6 ? 1e-3 : s <= 10 ? 5e-4 : 2.5e-4) << "step " << s;
  auto saved = read_json_file(d.path() / "checkpoint-6" / "scheduler.json")["reduce_lr_on_plateau"];
  EXPECT_EQ(saved["_last_lr"], 5e-4);
  EXPECT_EQ(saved["last_epoch"], 3);
  EXPECT_EQ(saved["num_bad_epochs"], 0);

  // Stopped at step 8 and resumed: the same rates and the same model.
  a.output_dir = r.path().string();
  auto straight = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
  {
    train::TrainingArguments b = a;
    b.output_dir = (r.path() / "straight").string();
    b.resolve_defaults();
    train::Trainer t(*straight, b, train::Task::TextClassification, rows(), rows(8), collator());
    t.train();
  }
  {
    auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
    train::TrainingArguments b = a;
    b.resolve_defaults();
    train::Trainer t(*m, b, train::Task::TextClassification, rows(), rows(8), collator());
    t.stop_after_step(8);
    t.train();
  }
  auto resumed = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 5);
  {
    train::TrainingArguments b = a;
    b.resume_from_checkpoint = "latest";
    b.resolve_defaults();
    train::Trainer t(*resumed, b, train::Task::TextClassification, rows(), rows(8), collator());
    t.train();
  }
  auto after = read_json_file(r.path() / "trainer_state.json");
  for (const auto& e : after["log_history"])
    if (e.contains("learning_rate")) {
      EXPECT_EQ(e["learning_rate"], lr[e["step"]]) << "step " << e["step"];
    }
  auto want = straight->named_parameters(), got = resumed->named_parameters();
  ASSERT_EQ(want.size(), got.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_EQ(got[k].second.to_vector<float>(), want[k].second.to_vector<float>()) << want[k].first;

  // A checkpoint without the plateau's state cannot resume it.
  auto sched = read_json_file(r.path() / "checkpoint-8" / "scheduler.json");
  sched.erase("reduce_lr_on_plateau");
  io::write_json_file_atomic(r.path() / "checkpoint-8" / "scheduler.json", sched);
  auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
  train::TrainingArguments b = a;
  b.resume_from_checkpoint = (r.path() / "checkpoint-8").string();
  b.overwrite_output_dir = true;
  b.resolve_defaults();
  train::Trainer t(*m, b, train::Task::TextClassification, rows(), rows(8), collator());
  EXPECT_CONTAINS(testing::error_of([&] { t.train(); }),
                  "checkpoint-8/scheduler.json: no reduce_lr_on_plateau state (the checkpoint was written with "
                  "lr_scheduler_type 'reduce_lr_on_plateau')");
}

TEST(TrainerFlow, EarlyStoppingAfterPatienceEvaluationsWithoutImprovement) {
  // A learning rate of 0 never changes the model: every evaluation equals the
  // first, which sets the best metric when its checkpoint is saved. Patience
  // 2: the evaluations at steps 4 and 6 do not improve, so step 6 stops.
  TempDir d;
  auto a = args_for(d.path());
  a.learning_rate = 0;
  a.max_steps = 20;
  evaluate_and_save_every(a, 2);
  a.load_best_model_at_end = true;
  a.early_stopping_patience = 2;
  json state = train_with(a, rows(8));
  EXPECT_EQ(state["global_step"], 6);
  EXPECT_EQ(steps_with(state, "eval_loss"), (Steps{2, 4, 6}));
  EXPECT_EQ(state["stateful_callbacks"]["EarlyStoppingCallback"]["attributes"]["early_stopping_patience_counter"], 2);
  EXPECT_EQ(state["best_model_checkpoint"], (d.path() / "checkpoint-2").string());

  // Resumed at step 4, the counter (1) comes back from trainer_state.json.
  TempDir r;
  a.output_dir = r.path().string();
  {
    auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
    train::TrainingArguments b = a;
    b.resolve_defaults();
    train::Trainer t(*m, b, train::Task::TextClassification, rows(), rows(8), collator());
    t.stop_after_step(4);
    t.train();
  }
  EXPECT_EQ(read_json_file(r.path() / "checkpoint-4" / "trainer_state.json")["stateful_callbacks"]
                ["EarlyStoppingCallback"]["attributes"]["early_stopping_patience_counter"],
            1);
  a.resume_from_checkpoint = "latest";
  EXPECT_EQ(train_with(a, rows(8))["global_step"], 6);

  // A threshold larger than any change keeps a learning model from counting as improving.
  TempDir t;
  a.output_dir = t.path().string();
  a.resume_from_checkpoint.clear();
  a.learning_rate = 1e-3;
  a.early_stopping_threshold = 1e9;
  EXPECT_EQ(train_with(a, rows(8))["global_step"], 6);
  a.overwrite_output_dir = true;
  a.early_stopping_threshold = 0;
  a.early_stopping_patience.reset();
  json plain = train_with(a, rows(8));
  EXPECT_EQ(plain["global_step"], 20);
  EXPECT_FALSE(plain.contains("stateful_callbacks"));  // transformers 4.40's TrainerState has no such field
}

}  // namespace

// HF's speed metrics count the examples of the epochs run (num_train_samples),
// not full batches: 16 rows in batches of 6 are 3 steps of 6, 6 and 4, and a
// batch larger than the data set is the data set.
TEST(TrainerFlow, TrainSamplesPerSecondCountsTheExamplesTaken) {
  for (int64_t batch : {6, 1000}) {
    TempDir d;
    auto a = args_for(d.path());
    a.max_steps = -1;
    a.num_train_epochs = 2;
    a.per_device_train_batch_size = batch;
    a.resolve_defaults();
    auto m = models::create_model("BertForSequenceClassification", testing::tiny_bert(1), 1);
    train::Trainer t(*m, a, train::Task::TextClassification, rows(), nullptr, collator());
    const auto metrics = t.train();
    EXPECT_NEAR(metrics.at("train_samples_per_second") * metrics.at("train_runtime"), 32.0, 1e-6) << "batch " << batch;
  }
}

}  // namespace kiln
