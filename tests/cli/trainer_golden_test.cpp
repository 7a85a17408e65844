// kiln train against transformers' Trainer, a whole run at a time:
// tests/goldens/trainer/runs.json holds, for tiny BERT, GPT-2, Llama and T5 models,
// the flags of each case and what HF's Trainer logged (gen_trainer_goldens.py):
// every log_history entry (loss, grad_norm, learning_rate, epoch, eval_loss,
// num_input_tokens_seen, the summary's train_loss and total_flos, and the keys
// of each entry) and the L2 norm of every tensor of the final model. The cases
// exercise weight-decay
// groups, clipping, schedules and warmup, gradient accumulation (token-weighted,
// and an epoch's last step taking the batches left), label smoothing,
// logging_first_step and evaluation at the last step.
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "kiln/io/safetensors.h"
#include "support/golden_command.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/trainer";

const json& runs() {
  static const json j = read_json_file(kDir + "/runs.json");
  return j;
}

// A log entry's place: its step and whether it is a training log, an evaluation or the run's summary (a
// training log has a train_runtime too when input tokens are counted).
std::pair<int64_t, std::string> place(const json& e) {
  const std::string kind = e.contains("eval_loss")                             ? "eval"
                           : e.contains("train_runtime") && !e.contains("loss") ? "summary"
                                                                                 : "train";
  return {e.at("step").get<int64_t>(), kind};
}

// How close kiln's value of `key` must be to HF's: the schedule and the epoch
// are exact; losses and norms are float32 sums taken in another order.
void expect_close(const std::string& where, const std::string& key, double hf, double got) {
  if (key == "learning_rate" || key == "epoch" || key == "step") {
    EXPECT_NEAR(got, hf, 1e-12 + 1e-9 * std::abs(hf)) << where << " " << key;
  } else if (key == "total_flos") {
    EXPECT_NEAR(got, hf, 1e-9 * std::abs(hf)) << where << " " << key;
  } else {
    EXPECT_NEAR(got, hf, 1e-7 + 1e-4 * std::abs(hf)) << where << " " << key;
  }
}

// Keys kiln's entries add to HF's: the example scripts' compute_metrics (run_glue's accuracy, kiln's macro-F1)
// and run_clm's perplexity.
const std::set<std::string> kExtraKeys = {"eval_accuracy", "eval_f1", "perplexity"};

void compare_history(const json& hf, const json& kiln) {
  ASSERT_EQ(kiln.size(), hf.size()) << "log_history\nkiln: " << kiln.dump() << "\nHF: " << hf.dump();
  for (size_t i = 0; i < hf.size(); ++i) {
    const json &h = hf[i], &k = kiln[i];
    const auto [step, kind] = place(h);
    const std::string where = "log_history[" + std::to_string(i) + "] (step " + std::to_string(step) + ", " + kind + ")";
    ASSERT_EQ(place(k), place(h)) << where << ": kiln " << k.dump();
    for (const auto& [key, value] : h.items()) {
      ASSERT_TRUE(k.contains(key)) << where << ": no '" << key << "' in " << k.dump();
      if (value.is_number()) expect_close(where, key, value.get<double>(), k.at(key).get<double>());
    }
    for (const auto& [key, value] : k.items())
      EXPECT_TRUE(h.contains(key) || kExtraKeys.count(key)) << where << ": HF has no '" << key << "'";
  }
}

void compare_weights(const json& norms, const fs::path& file) {
  const auto weights = io::load_safetensors(file, Device::cpu());
  for (const auto& [name, t] : weights) {
    ASSERT_TRUE(norms.contains(name)) << file << ": '" << name << "' is not in HF's model";
    double sq = 0;
    for (float v : t.to_vector<float>()) sq += static_cast<double>(v) * v;
    const double hf = norms.at(name).get<double>();
    EXPECT_NEAR(std::sqrt(sq), hf, 1e-5 * hf + 1e-7) << "final weight norm of " << name;
  }
}

class TrainerGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainerGolden, MatchesTransformersTrainer) {
  const json& c = runs().at(GetParam());
  testing::TempDir d;
  const fs::path out = d.path() / "out";
  const testing::KilnRun r = testing::run_kiln(testing::golden_train_command(c.at("flags"), kDir, out), d.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const json state = read_json_file(out / "trainer_state.json");
  compare_history(c.at("log_history"), state.at("log_history"));
  compare_weights(c.at("weight_norms"), out / "model.safetensors");
}

INSTANTIATE_TEST_SUITE_P(Cases, TrainerGolden,
                         ::testing::Values("bert_linear", "bert_smoothing", "bert_accumulation", "gpt2_polynomial",
                                           "gpt2_smoothing", "llama_accumulation", "t5_accumulation", "t5_remainder",
                                           "t5_partial_batch", "t5_drop_last"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(TrainerGoldenFile, EveryCaseIsTested) {
  std::set<std::string> names;
  for (const auto& [name, c] : runs().items()) names.insert(name);
  EXPECT_EQ(names, (std::set<std::string>{"bert_linear", "bert_smoothing", "bert_accumulation", "gpt2_polynomial",
                                          "gpt2_smoothing", "llama_accumulation", "t5_accumulation", "t5_remainder",
                                          "t5_partial_batch", "t5_drop_last"}));
}

}  // namespace
}  // namespace kiln
