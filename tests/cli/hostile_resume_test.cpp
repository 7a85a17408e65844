// Resuming from a checkpoint someone edited: trainer_state.json, rng_state.json and optimizer.safetensors'
// step with wrong types, negative or inconsistent values are errors naming the file and key, never a run that
// restarts the data or the schedule from a default. SFT flags that disagree are errors too.
#include <filesystem>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using testing::KilnRun;
using testing::run_kiln;

const std::string kSft = std::string(KILN_TEST_DATA_DIR) + "/sft/";

class HostileResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("config.json", R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
      "max_position_embeddings": 128, "vocab_size": 384, "rms_norm_eps": 1e-6})");
  }
  std::string train(const std::string& out, const std::string& extra) const {
    return "train --task sft --config_name " + (dir_ / "config.json").string() + " --tokenizer_name " + kSft +
           "tokenizer --train_file " + kSft + "chat.jsonl --per_device_train_batch_size 4 --max_steps 4 --output_dir " +
           (dir_ / out).string() + " " + extra;
  }
  // A copy of the saved checkpoint-2 with `file`'s JSON changed by `edit`.
  template <class Edit>
  fs::path tampered(const std::string& name, const char* file, Edit edit) const {
    const fs::path ck = dir_ / name;
    fs::copy(dir_ / "base" / "checkpoint-2", ck, fs::copy_options::recursive);
    json j = read_json_file(ck / file);
    edit(j);
    io::write_json_file_atomic(ck / file, j);
    return ck;
  }
  KilnRun resume(const fs::path& ck) const {
    return run_kiln(train("out_" + ck.filename().string(), "--resume_from_checkpoint " + ck.string()), dir_.path());
  }
  testing::TempDir dir_;
};

TEST_F(HostileResume, TamperedCheckpointsAreErrorsNamingTheFile) {
  ASSERT_EQ(run_kiln(train("base", "--save_steps 2"), dir_.path()).status, 0);
  struct Case {
    const char* name;
    const char* file;
    std::function<void(json&)> edit;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"null_step", "trainer_state.json", [](json& j) { j["global_step"] = nullptr; }, "trainer_state.json: no 'global_step'"},
      {"negative_step", "trainer_state.json", [](json& j) { j["global_step"] = -3; },
       "trainer_state.json: 'global_step' must be >= 0, got -3"},
      {"bad_history", "trainer_state.json", [](json& j) { j["log_history"] = json::array({1}); },
       "trainer_state.json: log_history[0] must be an object, got number 1"},
      {"far_epoch", "rng_state.json", [](json& j) { j["data_epoch"] = 1000000; },
       "rng_state.json: 'data_epoch' must be in [0, 2]"},
      {"zero_batch", "rng_state.json", [](json& j) { j["data_batch_size"] = 0; },
       "rng_state.json: 'data_batch_size' must be >= 1, got 0"},
      {"bad_per_epoch", "rng_state.json", [](json& j) { j["data_batch_size"] = 2, j["data_batches_per_epoch"] = -5; },
       "rng_state.json: 'data_position' 2 must be in [0, 'data_batches_per_epoch' -5]"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const KilnRun r = resume(tampered(c.name, c.file, c.edit));
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_CONTAINS(r.output, c.error);
  }
  // A checkpoint past this run's steps trains nothing, and says so.
  const KilnRun r = resume(tampered("past_end", "trainer_state.json", [](json& j) { j["global_step"] = 100; }));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "global_step 100 is at or past this run's 4 optimizer steps");
}

TEST_F(HostileResume, SftMaxLengthSpellingsMustAgree) {
  const KilnRun r = run_kiln(train("o", "--max_length 5 --max_seq_length 7"), dir_.path());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--max_length 5 and --max_seq_length 7 disagree");
}

}  // namespace
}  // namespace kiln
