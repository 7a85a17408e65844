// The Trainer: exact resume, HF's weight-decay grouping, logging and state.
#include <filesystem>

#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/model.h"
#include "kiln/train/trainer.h"
#include "support/temp_dir.h"
#include "tiny_bert.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

models::BertConfig tiny() { return testing::tiny_bert(1); }

std::shared_ptr<data::Features> features(int n) { return testing::tiny_classification_features(n); }

train::TrainingArguments args_for(const fs::path& out) {
  train::TrainingArguments a;
  a.output_dir = out.string();
  a.max_steps = 20;
  a.save_steps = 10;
  a.logging_steps = 5;
  a.per_device_train_batch_size = 4;
  a.learning_rate = 1e-3;
  a.weight_decay = 0.01;
  a.warmup_steps = 3;
  a.seed = 7;
  return a;
}

data::CollatorOptions collator() {
  data::CollatorOptions c;
  c.pad_token_id = 0;
  c.max_length = 12;
  c.pad_to_multiple_of = 4;
  return c;
}

std::map<std::string, std::vector<float>> params_of(const models::PreTrainedModel& m) {
  std::map<std::string, std::vector<float>> out;
  for (auto& [n, p] : m.named_parameters()) out[n] = p.to_vector<float>();
  return out;
}

TEST(Trainer, TwentyStepsEqualTenPlusResumePlusTenBitwise) {
  auto feats = features(30);  // 8 batches an epoch: the run crosses epochs
  TempDir a, b;
  auto straight = models::create_model("BertForSequenceClassification", tiny(), 1);
  {
    train::Trainer t(*straight, args_for(a.path()), train::Task::TextClassification, feats, nullptr, collator());
    t.train();
  }
  {
    auto first = models::create_model("BertForSequenceClassification", tiny(), 1);
    train::Trainer t(*first, args_for(b.path()), train::Task::TextClassification, feats, nullptr, collator());
    t.stop_after_step(10);
    t.train();
  }
  ASSERT_TRUE(fs::exists(b.path() / "checkpoint-10" / "optimizer.safetensors"));
  auto resumed = models::create_model("BertForSequenceClassification", tiny(), 99);  // different init: all comes from the checkpoint
  auto args = args_for(b.path());
  args.resume_from_checkpoint = "latest";
  {
    train::Trainer t(*resumed, args, train::Task::TextClassification, feats, nullptr, collator());
    t.train();
    EXPECT_EQ(t.state().global_step, 20);
  }
  auto pa = params_of(*straight), pb = params_of(*resumed);
  for (auto& [name, v] : pa) EXPECT_EQ(v, pb.at(name)) << name;  // bitwise
  // The loss history of the resumed run continues the straight run's.
  auto la = read_json_file(a.path() / "trainer_state.json")["log_history"];
  auto lb = read_json_file(b.path() / "trainer_state.json")["log_history"];
  ASSERT_GE(la.size(), 4u);
  ASSERT_GE(lb.size(), 4u);
  EXPECT_EQ(la[3]["loss"], lb[3]["loss"]);
}

// Every --optim resumes exactly: its state (under PyTorch's names) and step
// count come back from optimizer.safetensors.
TEST(Trainer, EveryOptimizerResumesBitwise) {
  auto feats = features(30);
  for (const std::string optim : {"adafactor", "sgd", "adagrad", "rmsprop"}) {
    SCOPED_TRACE(optim);
    TempDir a, b;
    auto args = args_for(a.path());
    args.optim = optim;
    args.max_steps = 12;
    args.save_steps = 6;
    auto straight = models::create_model("BertForSequenceClassification", tiny(), 1);
    {
      train::Trainer t(*straight, args, train::Task::TextClassification, feats, nullptr, collator());
      t.train();
    }
    args.output_dir = b.path().string();
    {
      auto first = models::create_model("BertForSequenceClassification", tiny(), 1);
      train::Trainer t(*first, args, train::Task::TextClassification, feats, nullptr, collator());
      t.stop_after_step(6);
      t.train();
    }
    auto st = io::SafetensorsFile::open(b.path() / "checkpoint-6" / "optimizer.safetensors");
    EXPECT_EQ(st.metadata().at("optim"), optim);
    EXPECT_EQ(st.metadata().at("step"), "6");
    if (optim == "adafactor") {  // a [16, 16] weight keeps a row and a column
      const auto* row = st.find("state.bert.encoder.layer.0.attention.self.query.weight.exp_avg_sq_row");
      ASSERT_NE(row, nullptr);
      EXPECT_EQ(row->shape, (Shape{16}));
      EXPECT_NE(st.find("state.bert.encoder.layer.0.attention.self.query.bias.exp_avg_sq"), nullptr);
    }
    auto resumed = models::create_model("BertForSequenceClassification", tiny(), 99);
    args.resume_from_checkpoint = "latest";
    {
      train::Trainer t(*resumed, args, train::Task::TextClassification, feats, nullptr, collator());
      t.train();
      EXPECT_EQ(t.state().global_step, 12);
    }
    auto pa = params_of(*straight), pb = params_of(*resumed), p0 = params_of(*models::create_model(
                                                                  "BertForSequenceClassification", tiny(), 1));
    for (auto& [name, v] : pa) EXPECT_EQ(v, pb.at(name)) << name;
    EXPECT_NE(pa.at("classifier.weight"), p0.at("classifier.weight"));  // it trained
  }
}

// A checkpoint's optimizer state belongs to the optimizer that wrote it.
TEST(Trainer, ResumingWithAnotherOptimizerIsAnError) {
  auto feats = features(30);
  TempDir d;
  auto args = args_for(d.path());
  args.optim = "adafactor";
  {
    auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
    train::Trainer t(*m, args, train::Task::TextClassification, feats, nullptr, collator());
    t.stop_after_step(10);
    t.train();
  }
  args.optim = "adamw_torch";
  args.resume_from_checkpoint = "latest";
  auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
  train::Trainer t(*m, args, train::Task::TextClassification, feats, nullptr, collator());
  EXPECT_CONTAINS(testing::error_of([&] { t.train(); }),
                  "checkpoint-10/optimizer.safetensors holds the state of optim 'adafactor', but this run uses optim "
                  "'adamw_torch': resume with --optim adafactor");
}

// A damaged checkpoint is an error naming the file, before any step runs.
TEST(Trainer, DamagedCheckpointFilesAreNamed) {
  auto feats = features(30);
  TempDir d;
  {
    auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
    train::Trainer t(*m, args_for(d.path()), train::Task::TextClassification, feats, nullptr, collator());
    t.stop_after_step(10);
    t.train();
  }
  const fs::path ck = d.path() / "checkpoint-10";
  auto resume_error = [&] {
    auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
    auto args = args_for(d.path());
    args.resume_from_checkpoint = ck.string();
    train::Trainer t(*m, args, train::Task::TextClassification, feats, nullptr, collator());
    return testing::error_of([&] { t.train(); });
  };
  auto rng = read_json_file(ck / "rng_state.json");
  auto bad = rng;
  bad["data_position"] = 99999;
  io::write_json_file_atomic(ck / "rng_state.json", bad);
  EXPECT_CONTAINS(resume_error(), "checkpoint-10/rng_state.json: DataLoader::seek: epoch ");
  bad = rng;
  bad.erase("dropout_offset");
  io::write_json_file_atomic(ck / "rng_state.json", bad);
  EXPECT_CONTAINS(resume_error(), "checkpoint-10/rng_state.json: no 'dropout_offset'");
  io::write_json_file_atomic(ck / "rng_state.json", rng);
  fs::remove(ck / "optimizer.safetensors");
  EXPECT_CONTAINS(resume_error(), "optimizer.safetensors is missing: not a complete checkpoint");
}

TEST(Trainer, SaveTotalLimitRotatesCheckpoints) {
  TempDir d;
  auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
  auto args = args_for(d.path());
  args.save_steps = 4;
  args.save_total_limit = 2;
  train::Trainer t(*m, args, train::Task::TextClassification, features(16), nullptr, collator());
  t.train();
  EXPECT_FALSE(fs::exists(d.path() / "checkpoint-4"));
  EXPECT_FALSE(fs::exists(d.path() / "checkpoint-12"));
  EXPECT_TRUE(fs::exists(d.path() / "checkpoint-16"));
  EXPECT_TRUE(fs::exists(d.path() / "checkpoint-20"));
  auto state = read_json_file(d.path() / "trainer_state.json");
  EXPECT_EQ(state["global_step"], 20);
  EXPECT_EQ(state["max_steps"], 20);
  EXPECT_EQ(state["log_history"][0]["step"], 5);
  EXPECT_TRUE(state["log_history"][0].contains("learning_rate"));
}

TEST(Trainer, EvaluateReportsAccuracyAndF1) {
  TempDir d;
  auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
  auto args = args_for(d.path());
  train::Trainer t(*m, args, train::Task::TextClassification, nullptr, features(10), collator());
  auto metrics = t.evaluate();
  EXPECT_TRUE(metrics.count("eval_loss"));
  EXPECT_GE(metrics.at("eval_accuracy"), 0.0);
  EXPECT_LE(metrics.at("eval_accuracy"), 1.0);
  EXPECT_TRUE(metrics.count("eval_f1"));
}

// A device that is not there fails train() with a message; destroying the
// Trainer during that error does not abort the process (its destructor
// waits for the device, which throws again).
TEST(Trainer, AMissingDeviceIsAnErrorNotACrash) {
  TempDir d;
  auto m = models::create_model("BertForSequenceClassification", tiny(), 1);
  auto args = args_for(d.path());
  args.device = "cuda:7";
  std::string error;
  try {
    train::Trainer t(*m, args, train::Task::TextClassification, features(8), nullptr, collator());
    t.train();
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_FALSE(error.empty());
  EXPECT_CONTAINS(error, "cuda");
}

}  // namespace
}  // namespace kiln
