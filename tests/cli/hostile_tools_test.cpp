// kiln plot and kiln merge on hostile input: a trainer_state.json whose values no double step can walk or
// whose span overflows, and a merge written into the adapter's own directory. Each is an error before
// anything is written, never a hang, an out-of-memory or a half-written directory.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::KilnRun;
using testing::run_kiln;

const std::string kSft = std::string(KILN_TEST_DATA_DIR) + "/sft/";

KilnRun plot(const testing::TempDir& dir, const std::string& name, const std::string& log_history) {
  fs::create_directories(dir / name);
  dir.write(name + "/trainer_state.json", R"({"log_history": )" + log_history + "}");
  return run_kiln("plot " + (dir / name).string(), dir.path(), 30);
}

TEST(HostilePlot, ValuesBeyondTheStepsPrecisionOrSpanAreNotAHang) {
  testing::TempDir dir;
  // Ticks 1 apart at 1e16, where x + 1 == x: the tick loop stepped forever, appending until out of memory.
  KilnRun r = plot(dir, "ulp", R"([{"loss": 1e16, "step": 1}, {"loss": 1.0000000000000004e16, "step": 2}])");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "ulp" / "training_curves.svg"));
  r = plot(dir, "ulp_steps", R"([{"loss": 1, "step": 1e17}, {"loss": 2, "step": 100000000000000016}])");
  EXPECT_EQ(r.status, 0) << r.output;
  // A span past the largest double has no scale: the SVG would hold NaN coordinates.
  r = plot(dir, "wide", R"([{"loss": -1e308, "step": 1}, {"loss": 1e308, "step": 2}])");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "wide/trainer_state.json: log_history: 'train loss' spans [-1e+308, 1e+308], too wide");
  EXPECT_FALSE(fs::exists(dir / "wide" / "training_curves.svg"));
  r = plot(dir, "wide_steps", R"([{"loss": 1, "step": -1.7e308}, {"loss": 2, "step": 1.7e308}])");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "log_history: 'step' spans");
  // transformers' own file after a diverged loss (Python's json writes NaN and Infinity): those points are left out.
  r = plot(dir, "python", R"([{"loss": NaN, "step": 1, "note": "NaN in a string"}, {"loss": Infinity, "step": 2},
      {"loss": -Infinity, "step": 3}, {"loss": 0.5, "step": 4}, {"loss": 0.25, "step": 5}])");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir / "python" / "training_curves.svg"));
  r = plot(dir, "nan_word", R"([{"loss": NaNa, "step": 1}])");
  EXPECT_EQ(r.status, 1) << r.output;
  fs::create_directories(dir / "ulp" / "out.svg");
  r = run_kiln("plot " + (dir / "ulp").string() + " --output " + (dir / "ulp" / "out.svg").string(), dir.path(), 30);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "out.svg: is a directory");
}

TEST(HostileMerge, IntoTheAdaptersOwnDirectoryIsRefusedBeforeWriting) {
  testing::TempDir dir;
  dir.write("config.json", R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
    "max_position_embeddings": 128, "vocab_size": 384})");
  const fs::path base = dir / "base", adapter = dir / "adapter";
  ASSERT_EQ(run_kiln("init --config " + (dir / "config.json").string() + " --output_dir " + base.string(), dir.path()).status,
            0);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(kSft + "tokenizer/" + f, base / f);
  KilnRun r = run_kiln("train --task sft --model_name_or_path " + base.string() + " --train_file " + kSft +
                           "chat.jsonl --per_device_train_batch_size 4 --max_steps 1 --use_peft --output_dir " +
                           adapter.string(),
                       dir.path());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const std::string& args : {"--model " + base.string() + " --adapter " + adapter.string(),
                                  "--model " + adapter.string()}) {
    r = run_kiln("merge " + args + " --output_dir " + adapter.string() + "/", dir.path());
    EXPECT_EQ(r.status, 1) << r.output;
    EXPECT_CONTAINS(r.output, "is the adapter's directory");
    EXPECT_FALSE(fs::exists(adapter / "model.safetensors"));
    EXPECT_FALSE(fs::exists(adapter / "config.json"));
  }
  // Into the base's own directory: the tokenizer files are already there.
  r = run_kiln("merge --model " + base.string() + " --adapter " + adapter.string() + " --output_dir " + base.string(),
               dir.path());
  EXPECT_EQ(r.status, 0) << r.output;
}

}  // namespace
}  // namespace kiln
