// The LoRA version of the main job (scripts/demo.sh), as docs/lora.md gives
// it: masked-LM pre-training of the demo BERT on the demo sentences, then a
// LoRA adapter on the labels with the base frozen (only the adapter and the
// new classifier, saved in full, train). The adapter must reach the main
// job's threshold, eval_accuracy >= 0.95, and resuming from a checkpoint of
// the run must give the straight run's adapter and metrics bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "kiln/core/json.h"
#include "kiln/io/safetensors.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

// The recipe of docs/lora.md ("On the demo data"); keep the two the same.
constexpr const char* kPretrain =
    " --task masked-lm --max_seq_length 32 --num_train_epochs 40 --per_device_train_batch_size 32"
    " --learning_rate 2e-3 --warmup_ratio 0.05 --weight_decay 0.01 --seed 42 --save_strategy no";
constexpr const char* kLora =
    " --task text-classification --max_seq_length 24 --pad_to_max_length --num_train_epochs 14"
    " --per_device_train_batch_size 64 --learning_rate 1.5e-3 --lr_scheduler_type constant_with_warmup"
    " --warmup_ratio 0.1 --weight_decay 0.01 --seed 42 --use_peft --lora_r 64 --lora_alpha 64 --lora_dropout 0"
    " --lora_target_modules all-linear";
// 47 steps an epoch (3000 examples, batch 64), 658 in all: one checkpoint,
// after epoch 10.
constexpr int kCheckpointStep = 470;

std::string bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(LoraDemo, ReachesTheMainJobsThresholdAndResumesExactly) {
  testing::TempDir dir;
  auto at = [&](const std::string& f) { return (dir.path() / f).string(); };
  auto r = run_kiln("demo-data --output_dir " + at("data"), dir.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string train = " --train_file " + at("data/train.csv");
  r = run_kiln("train --config_name " + at("data/model_config.json") + " --tokenizer_name " + at("data") + train +
                   kPretrain + " --output_dir " + at("base"),
               dir.path(), 600);
  ASSERT_EQ(r.status, 0) << r.output;

  const std::string lora = "train --model_name_or_path " + at("base") + train + " --validation_file " +
                           at("data/validation.csv") + kLora + " --save_steps " +
                           std::to_string(kCheckpointStep) + " --output_dir ";
  r = run_kiln(lora + at("lora"), dir.path(), 600);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto metrics = read_json_file(dir.path() / "lora" / "eval_results.json");
  EXPECT_GE(metrics.at("eval_accuracy").get<double>(), 0.95) << r.output;

  // Only the adapter and the classifier trained: the run saved no full model,
  // and its optimizer state is theirs alone.
  const fs::path checkpoint = dir.path() / "lora" / ("checkpoint-" + std::to_string(kCheckpointStep));
  EXPECT_FALSE(fs::exists(dir.path() / "lora" / "model.safetensors"));
  auto is_lora = [](const std::string& name) {
    return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
  };
  auto count_trained = [&](const io::SafetensorsFile& file) {
    int n = 0;
    for (const auto& e : file.entries()) {
      EXPECT_TRUE(is_lora(e.name) || e.name.find("classifier.") != std::string::npos) << e.name;
      n += is_lora(e.name);
    }
    return n;
  };
  // 13 adapted layers (all-linear: 6 in each of the 2 layers, and the pooler's) × (A, B).
  EXPECT_EQ(count_trained(io::SafetensorsFile::open(dir.path() / "lora" / "adapter_model.safetensors")), 13 * 2);
  // × (exp_avg, exp_avg_sq).
  EXPECT_EQ(count_trained(io::SafetensorsFile::open(checkpoint / "optimizer.safetensors")), 13 * 2 * 2);

  // Resumed from the checkpoint: the straight run's adapter and metrics.
  fs::create_directories(dir.path() / "resumed");
  fs::copy(checkpoint, dir.path() / "resumed" / checkpoint.filename());
  r = run_kiln(lora + at("resumed") + " --overwrite_output_dir --resume_from_checkpoint " +
                   (dir.path() / "resumed" / checkpoint.filename()).string(),
               dir.path(), 600);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bytes(dir.path() / "resumed" / "adapter_model.safetensors"),
            bytes(dir.path() / "lora" / "adapter_model.safetensors"));
  const auto resumed = read_json_file(dir.path() / "resumed" / "eval_results.json");
  for (const char* key : {"eval_accuracy", "eval_loss", "eval_f1"})
    EXPECT_EQ(resumed.at(key).get<double>(), metrics.at(key).get<double>()) << key;
}

}  // namespace
}  // namespace kiln
