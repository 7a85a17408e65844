// An HF user's files and habits against transformers 5: an args file with 5's activation_checkpointing (the new
// name of gradient_checkpointing) and fractional warmup_steps, log entries unrounded as 5 logs them, 5's $TENSORBOARD_LOGGING_DIR with the
// run's arguments as TensorBoard text, and generate's logits processors in kiln predict.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kiln/core/file.h"
#include "kiln/io/json_file.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::KilnRun;
using testing::run_kiln;

class HfAudit : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(run_kiln("demo-data --output_dir " + data().string(), dir_.path()).status, 0); }
  fs::path data() const { return dir_ / "data"; }
  KilnRun train(const std::string& out, const std::string& extra) const {
    return run_kiln("train --config_name " + (data() / "model_config.json").string() + " --tokenizer_name " +
                        data().string() + " --train_file " + (data() / "train.csv").string() +
                        " --max_seq_length 16 --max_steps 2 --save_strategy no --output_dir " + (dir_ / out).string() +
                        extra,
                    dir_.path());
  }
  testing::TempDir dir_;
};

// transformers 5 writes activation_checkpointing and its deprecated alias gradient_checkpointing, mirrored: both are
// kiln's gradient_checkpointing, and torch-only checkpoint arguments (use_reentrant) ask for nothing.
TEST_F(HfAudit, ArgsFileActivationCheckpointingIsGradientCheckpointing) {
  auto j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/hf_args/training_args.json");
  j["activation_checkpointing"] = j["gradient_checkpointing"] = true;
  j["activation_checkpointing_kwargs"] = j["gradient_checkpointing_kwargs"] = {{"use_reentrant", false}};
  j["report_to"] = nlohmann::json::array();
  io::write_json_file_atomic(dir_ / "ac.json", j);
  KilnRun r = train("out", " --args_file " + (dir_ / "ac.json").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(dir_ / "out" / "training_args.json")["gradient_checkpointing"], true);
  // Checkpointing every other layer is something kiln does not have: the error names the file's key.
  j["activation_checkpointing_kwargs"] = {{"every_n_layers", 2}};
  io::write_json_file_atomic(dir_ / "every2.json", j);
  r = train("out2", " --args_file " + (dir_ / "every2.json").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "every2.json: key 'activation_checkpointing_kwargs': {\"every_n_layers\":2} asks for");
  // The new name as a flag.
  r = train("out3", " --activation_checkpointing true");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(dir_ / "out3" / "training_args.json")["gradient_checkpointing"], true);
}

// transformers 5's warmup_steps is a float, a fraction of the steps below 1 (5 dropped warmup_ratio): 0.25 of 8
// steps warms up over 2, and each entry logs the rate its step used (transformers 5 reads it before the scheduler
// steps).
TEST_F(HfAudit, ArgsFileFractionalWarmupSteps) {
  auto j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/hf_args/training_args.json");
  j["warmup_steps"] = 0.25;
  j["max_steps"] = 8;
  j["logging_steps"] = 1;
  j["learning_rate"] = 5e-5;
  j["report_to"] = nlohmann::json::array();
  io::write_json_file_atomic(dir_ / "warm.json", j);
  KilnRun r = run_kiln("train --config_name " + (data() / "model_config.json").string() + " --tokenizer_name " +
                           data().string() + " --train_file " + (data() / "train.csv").string() +
                           " --max_seq_length 16 --output_dir " + (dir_ / "out").string() + " --args_file " +
                           (dir_ / "warm.json").string(),
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<double> rates;
  const auto state = read_json_file(dir_ / "out" / "trainer_state.json");
  for (const auto& e : state["log_history"])
    if (e.contains("learning_rate")) rates.push_back(e["learning_rate"]);
  const std::vector<double> linear = {0, 0.5, 1, 5.0 / 6, 4.0 / 6, 3.0 / 6, 2.0 / 6, 1.0 / 6};
  ASSERT_EQ(rates.size(), linear.size());
  for (size_t s = 0; s < rates.size(); ++s) EXPECT_NEAR(rates[s], 5e-5 * linear[s], 1e-12) << "step " << s + 1;
}

// transformers 5's Trainer.log keeps the loss and the epoch as computed (4.x rounded them to 4 and 2 decimals).
TEST_F(HfAudit, LogEntriesAreUnrounded) {
  KilnRun r = train("out", " --logging_steps 2");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto entry = read_json_file(dir_ / "out" / "trainer_state.json")["log_history"][0];
  ASSERT_EQ(entry["step"], 2) << entry.dump();
  EXPECT_DOUBLE_EQ(entry["epoch"].get<double>(), 2.0 / 375);  // 3,000 rows, batches of 8
  const double loss = entry["loss"];
  EXPECT_NE(loss, std::round(loss * 1e4) / 1e4) << "the loss is rounded to 4 decimals";
}

// Without --logging_dir, $TENSORBOARD_LOGGING_DIR (transformers 5's only setting) holds the events, which start
// with the run's arguments as text, as TensorBoardCallback.on_train_begin adds them.
TEST_F(HfAudit, TensorBoardLoggingDirFromTheEnvironment) {
  const fs::path tb = dir_ / "tb_env";
  ::setenv("TENSORBOARD_LOGGING_DIR", tb.c_str(), 1);
  KilnRun r = train("out", " --logging_steps 1 --report_to tensorboard");
  ::unsetenv("TENSORBOARD_LOGGING_DIR");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "out" / "runs"));
  ASSERT_TRUE(fs::is_directory(tb));
  fs::path events;
  for (const auto& e : fs::directory_iterator(tb)) events = e.path();
  ASSERT_EQ(events.filename().string().rfind("events.out.tfevents.", 0), 0u) << events;
  const std::string bytes = read_file(events);
  EXPECT_NE(bytes.find("args/text_summary"), std::string::npos);
  EXPECT_NE(bytes.find("model_config/text_summary"), std::string::npos);
  EXPECT_NE(bytes.find("\"learning_rate\""), std::string::npos);  // the arguments' JSON
  EXPECT_NE(bytes.find("train/loss"), std::string::npos);
}

// kiln predict takes generate's logits-processor flags (--repetition_penalty, --no_repeat_ngram_size) beside the beam
// flags, and generates as kiln generate does with them.
TEST_F(HfAudit, PredictTakesTheLogitsProcessorFlags) {
  const fs::path tokenizer = fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small";
  SKIP_WITHOUT_SHARED(tokenizer.string());
  const fs::path m = dir_ / "t5";
  ASSERT_EQ(run_kiln("init --config t5-tiny --seed 3 --output_dir " + m.string(), dir_.path()).status, 0);
  for (const char* f : {"spiece.model", "tokenizer.json"}) fs::copy_file(tokenizer / f, m / f);
  const std::string flags = " --num_beams 3 --max_new_tokens 8 --no_repeat_ngram_size 2 --repetition_penalty 1.3";
  const fs::path test = dir_.write("t.txt", "summarize: the battery lasts all day\n");
  KilnRun p = run_kiln("predict --model_name_or_path " + m.string() + " --test_file " + test.string() + " --output " +
                           (dir_ / "p.jsonl").string() + flags,
                       dir_.path());
  ASSERT_EQ(p.status, 0) << p.output;
  KilnRun g = run_kiln("generate --model_name_or_path " + m.string() + " --prompt 'summarize: the battery lasts all day'" +
                           flags,
                       dir_.path());
  ASSERT_EQ(g.status, 0) << g.output;
  const auto row = nlohmann::json::parse(read_file(dir_ / "p.jsonl"));
  EXPECT_EQ(row["generated_text"].get<std::string>() + "\n", g.output);
  KilnRun plain = run_kiln("generate --model_name_or_path " + m.string() +
                               " --prompt 'summarize: the battery lasts all day' --num_beams 3 --max_new_tokens 8",
                           dir_.path());
  EXPECT_NE(plain.output, g.output) << "the processors change nothing on this model";
  // No new tokens to generate is an error, as GenerationConfig.validate makes it.
  KilnRun none = run_kiln("generate --model_name_or_path " + m.string() + " --prompt hi --max_new_tokens 0", dir_.path());
  EXPECT_EQ(none.status, 1);
  EXPECT_CONTAINS(none.output, "--max_new_tokens must be >= 1, got 0");
}

}  // namespace
}  // namespace kiln
