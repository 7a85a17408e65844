// kiln train --task seq2seq --predict_with_generate, as HF's Seq2SeqTrainer:
// every evaluation during training generates (generation_max_length,
// generation_num_beams) and logs eval_rouge1/2/L/Lsum, eval_bleu and
// eval_gen_len into log_history and TensorBoard; --metric_for_best_model
// rougeL chooses the best checkpoint by them.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>

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

class Seq2SeqGenerateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_kiln("demo-data --output_dir " + (dir_ / "data").string(), dir_.path()).status, 0);
  }
  // A t5-tiny learning each demo sentence's label word, evaluated every 10 of 20 steps on 24 rows.
  std::string train_args(const std::string& out) const {
    const fs::path data = dir_ / "data";
    return "train --task seq2seq --config_name t5-tiny --tokenizer_name " + data.string() + " --train_file " +
           (data / "train.csv").string() + " --validation_file " + (data / "validation.csv").string() +
           " --source_column sentence --target_column label --max_source_length 24 --max_target_length 4" +
           " --max_eval_samples 24 --max_steps 20 --logging_steps 10 --per_device_train_batch_size 16" +
           " --learning_rate 3e-3 --eval_strategy steps --eval_steps 10 --seed 3 --output_dir " +
           (dir_ / out).string();
  }
  testing::TempDir dir_;
};

const char* const kGenerated[] = {"eval_rouge1", "eval_rouge2", "eval_rougeL", "eval_rougeLsum", "eval_bleu",
                                  "eval_gen_len"};

TEST_F(Seq2SeqGenerateCli, PeriodicEvaluationGeneratesAndChoosesTheBestByRougeL) {
  KilnRun r = run_kiln(train_args("out") +
                           " --predict_with_generate --generation_max_length 3 --generation_num_beams 2" +
                           " --save_strategy steps --save_steps 10 --metric_for_best_model rougeL" +
                           " --load_best_model_at_end --report_to tensorboard",
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto state = read_json_file(dir_ / "out" / "trainer_state.json");
  std::vector<std::pair<int64_t, double>> rouge_l;  // per evaluation step
  std::map<int64_t, double> losses;
  for (const auto& e : state["log_history"]) {
    if (!e.contains("eval_loss")) continue;
    for (const char* k : kGenerated) ASSERT_TRUE(e.contains(k)) << k << " in " << e.dump();
    // At least one id each, at most generation_max_length - 1 (HF's max_length counts the decoder's start).
    EXPECT_GE(e["eval_gen_len"].get<double>(), 1.0) << e.dump();
    EXPECT_LE(e["eval_gen_len"].get<double>(), 2.0) << e.dump();
    for (const char* k : {"eval_rouge1", "eval_rougeL", "eval_bleu"}) {
      EXPECT_GE(e[k].get<double>(), 0.0) << k;
      EXPECT_LE(e[k].get<double>(), 100.0) << k;
    }
    EXPECT_LE(e["eval_rouge2"].get<double>(), e["eval_rouge1"].get<double>());
    rouge_l.emplace_back(e["step"].get<int64_t>(), e["eval_rougeL"].get<double>());
    losses[e["step"].get<int64_t>()] = e["eval_loss"].get<double>();
  }
  // Steps 10 and 20 (trainer_state.json is written before the final evaluation).
  ASSERT_EQ(rouge_l.size(), 2u) << state["log_history"].dump();
  // The best checkpoint is the first with the largest rougeL (greater is better for a non-loss metric).
  const auto best = std::max_element(rouge_l.begin(), rouge_l.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  EXPECT_DOUBLE_EQ(state["best_metric"].get<double>(), best->second);
  EXPECT_EQ(fs::path(state["best_model_checkpoint"].get<std::string>()).filename(),
            "checkpoint-" + std::to_string(best->first));
  // The final evaluation scores the generated outputs too, as run_summarization's trainer.evaluate() does.
  // It evaluates the best checkpoint, loaded at the end (its loss, not the last step's).
  const auto results = read_json_file(dir_ / "out" / "eval_results.json");
  for (const char* k : kGenerated) EXPECT_TRUE(results.contains(k)) << k << " in " << results.dump();
  EXPECT_NEAR(results["eval_loss"].get<double>(), losses[best->first], 1e-6);
  EXPECT_DOUBLE_EQ(results["eval_rougeL"].get<double>(), best->second);
  // TensorBoard gets them under eval/, as HF's TensorBoardCallback rewrites eval_*.
  std::string events;
  for (const auto& e : fs::recursive_directory_iterator(dir_ / "out" / "runs"))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = read_file(e.path());
  for (const char* tag : {"eval/rouge1", "eval/rougeLsum", "eval/bleu", "eval/gen_len"})
    EXPECT_NE(events.find(tag), std::string::npos) << tag;
}

// Without --predict_with_generate an evaluation only computes the loss, so rougeL cannot choose the best model.
TEST_F(Seq2SeqGenerateCli, WithoutPredictWithGenerateThereIsNoRouge) {
  KilnRun r = run_kiln(train_args("plain") + " --save_strategy no", dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const auto& e : read_json_file(dir_ / "plain" / "trainer_state.json")["log_history"])
    EXPECT_FALSE(e.contains("eval_rouge1")) << e.dump();
  r = run_kiln(train_args("bad") + " --save_strategy no --metric_for_best_model rougeL", dir_.path());
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "--metric_for_best_model 'rougeL': the evaluation has no 'eval_rougeL'");
}

// --do_predict under --predict_with_generate: generated_predictions.txt, one line per test row, and the
// scores with predict_gen_len in predict_results.json.
TEST_F(Seq2SeqGenerateCli, PredictWritesTheGeneratedLinesAndTheirScores) {
  KilnRun r = run_kiln(train_args("p") + " --save_strategy no --predict_with_generate --generation_max_length 2" +
                           " --do_predict --test_file " + (dir_ / "data" / "validation.csv").string() +
                           " --max_predict_samples 5",
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string lines = read_file(dir_ / "p" / "generated_predictions.txt");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 5) << lines;
  const auto predict = read_json_file(dir_ / "p" / "predict_results.json");
  for (const char* k : {"predict_loss", "predict_rougeL", "predict_bleu", "predict_gen_len"})
    EXPECT_TRUE(predict.contains(k)) << k << " in " << predict.dump();
  EXPECT_DOUBLE_EQ(predict["predict_gen_len"].get<double>(), 1.0);  // generation_max_length 2: one new token
  // generation_max_length 1 generates nothing after the start token, as HF's generate(max_length=1).
  r = run_kiln("eval --model_name_or_path " + (dir_ / "p").string() + " --validation_file " +
                   (dir_ / "data" / "validation.csv").string() + " --source_column sentence --target_column label" +
                   " --max_eval_samples 3 --predict_with_generate --generation_max_length 1 --output_dir " +
                   (dir_ / "ev").string(),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto ev = read_json_file(dir_ / "ev" / "eval_results.json");
  EXPECT_EQ(ev["eval_gen_len"].get<double>(), 0.0) << ev.dump();
  EXPECT_EQ(ev["eval_rouge1"].get<double>(), 0.0) << ev.dump();
  EXPECT_FALSE(predict.contains("perplexity"));
}

}  // namespace
}  // namespace kiln
