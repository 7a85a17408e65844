// What an HF user types: HF's flag names on every command (kiln's short ones
// too), an args file HF's TrainingArguments wrote, run_clm's and
// run_summarization's spellings, the task read from the model, and an honest
// progress line.
#include <algorithm>
#include <filesystem>
#include <fstream>
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

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

class HfFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_kiln("demo-data --output_dir " + data().string(), dir_.path()).status, 0);
  }
  fs::path data() const { return dir_ / "data"; }
  std::string tokenizer_and_data() const {
    return " --tokenizer_name " + data().string() + " --train_file " + (data() / "train.csv").string() +
           " --max_seq_length 16";
  }
  // A small classifier trained for `steps` steps into `out`.
  KilnRun train_classifier(const std::string& out, const std::string& extra = "") const {
    return run_kiln("train --config_name " + (data() / "model_config.json").string() + tokenizer_and_data() +
                        " --max_steps 4 --save_strategy no --output_dir " + (dir_ / out).string() + extra,
                    dir_.path());
  }
  testing::TempDir dir_;
};

TEST_F(HfFlags, EveryCommandTakesHfNamesAndKilnsShortOnes) {
  ASSERT_EQ(train_classifier("model").status, 0);
  const std::string model = (dir_ / "model").string(), test = (data() / "test.txt").string();
  for (const std::string& flags : {"--model_name_or_path " + model + " --test_file " + test +
                                       " --per_device_eval_batch_size 4",
                                   "--model " + model + " --input " + test + " --batch_size 4",
                                   "--model-name-or-path=" + model + " --test-file " + test + " --bf16 false"}) {
    const fs::path out = dir_ / "p.jsonl";
    fs::remove(out);
    KilnRun r = run_kiln("predict " + flags + " --output " + out.string(), dir_.path());
    ASSERT_EQ(r.status, 0) << flags << "\n" << r.output;
    EXPECT_EQ(count(read_file(out), "\n"), 10u) << flags;
  }
  // A misspelt name is an error that suggests HF's name or kiln's, whichever is nearer.
  KilnRun r = run_kiln("predict --model_name_or_pth " + model + " --test_file " + test + " --output x", dir_.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "unknown flag '--model_name_or_pth' (did you mean --model_name_or_path?)");
  r = run_kiln("predict --modle " + model, dir_.path());
  EXPECT_CONTAINS(r.output, "(did you mean --model?)");
  r = run_kiln("predict --test_file " + test + " --output x", dir_.path());
  EXPECT_CONTAINS(r.output, "missing --model_name_or_path (or --model)");
  // kiln eval takes --model too, and --output_dir gets HF's eval_results.json.
  r = run_kiln("eval --model " + model + " --validation_file " + (data() / "validation.csv").string() +
                   " --max_seq_length 16 --output-dir " + (dir_ / "eval").string(),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const auto results = read_json_file(dir_ / "eval" / "eval_results.json");
  EXPECT_TRUE(results.contains("eval_loss") && results.contains("eval_accuracy")) << results.dump();
  // Switches take HF's true/false; a word that is neither is an error.
  r = run_kiln("generate --model_name_or_path " + model + " --prompt hi --do_sample maybe", dir_.path());
  EXPECT_EQ(r.status, 1);
}

TEST_F(HfFlags, ArgsFileWrittenByHfTrainingArgumentsLoads) {
  const std::string hf = std::string(KILN_TEST_DATA_DIR) + "/hf_args/training_args.json";
  KilnRun r = train_classifier("out", " --args_file " + hf);
  ASSERT_EQ(r.status, 0) << r.output;
  // The fields kiln has no use for are listed once; the run used the file's values.
  EXPECT_EQ(count(r.output, "ignored (HF fields kiln has no use for"), 1u) << r.output;
  EXPECT_CONTAINS(r.output, "torch_compile");
  const auto args = read_json_file(dir_ / "out" / "training_args.json");
  EXPECT_EQ(args["learning_rate"], 3e-5);
  EXPECT_EQ(args["seed"], 7);
  EXPECT_EQ(args["report_to"], "tensorboard");  // HF's list
  EXPECT_TRUE(fs::is_directory(dir_ / "out" / "runs"));
  // A field asking for what kiln lacks is an error naming it.
  auto j = read_json_file(hf);
  j["torch_compile"] = true;
  io::write_json_file_atomic(dir_ / "compile.json", j);
  r = train_classifier("out2", " --args_file " + (dir_ / "compile.json").string());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "compile.json: key 'torch_compile': true asks for torch.compile, which kiln does not have");
}

TEST_F(HfFlags, ResumeFromCheckpointTrueTakesTheLatest) {
  ASSERT_EQ(train_classifier("out", " --save_strategy steps --save_steps 2 --max_steps 2").status, 0);
  KilnRun r = train_classifier("out", " --save_strategy steps --save_steps 2 --resume_from_checkpoint true");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(dir_ / "out" / "trainer_state.json")["global_step"], 4);
  EXPECT_CONTAINS(r.output, "resuming from " + (dir_ / "out" / "checkpoint-2").string());
  // false is no resuming: the directory holds the last run, so it must be overwritten.
  r = train_classifier("out", " --resume_from_checkpoint false");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "already exists and is not empty");
}

TEST_F(HfFlags, TaskFromTheModelsArchitecture) {
  ASSERT_EQ(train_classifier("model").status, 0);
  KilnRun r = run_kiln("train --model_name_or_path " + (dir_ / "model").string() + tokenizer_and_data() +
                           " --max_steps 1 --save_strategy no --output_dir " + (dir_ / "again").string(),
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(dir_ / "again" / "config.json")["architectures"][0], "BertForSequenceClassification");
  // A GPT-2 language model continues as one.
  ASSERT_EQ(run_kiln("train --task causal-lm --config_name gpt2-tiny" + tokenizer_and_data() +
                         " --max_steps 1 --save_strategy no --output_dir " + (dir_ / "lm").string(),
                     dir_.path())
                .status,
            0);
  r = run_kiln("train --model_name_or_path " + (dir_ / "lm").string() + tokenizer_and_data() +
                   " --max_steps 1 --save_strategy no --output_dir " + (dir_ / "lm2").string(),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "task causal-lm (from the model's GPT2LMHeadModel");
  EXPECT_EQ(read_json_file(dir_ / "lm2" / "config.json")["architectures"][0], "GPT2LMHeadModel");
}

TEST_F(HfFlags, BlockSizeAndLineBreaksAsRunClm) {
  {
    std::ofstream f(dir_ / "corpus.txt");
    for (int i = 0; i < 200; ++i) f << "the battery is great\n\nthe screen is bad\n";
  }
  const std::string base = "train --task causal-lm --config_name gpt2-tiny --tokenizer_name " + data().string() +
                           " --train_file " + (dir_ / "corpus.txt").string() +
                           " --max_steps 1 --save_strategy no --per_device_train_batch_size 2 --output_dir ";
  auto examples = [](const std::string& out) {
    const size_t at = out.find(" examples\n");
    const size_t start = out.rfind(' ', at - 1);
    return std::stoll(out.substr(start + 1, at - start - 1));
  };
  // --block_size is run_clm's name for the block length; --keep_linebreaks false drops them (the data layer's
  // tests check the rows; this tokenizer reads a line break as a space).
  KilnRun block = run_kiln(base + (dir_ / "a").string() + " --block_size 8 --keep_linebreaks false", dir_.path());
  ASSERT_EQ(block.status, 0) << block.output;
  KilnRun length = run_kiln(base + (dir_ / "b").string() + " --max_seq_length 8", dir_.path());
  ASSERT_EQ(length.status, 0) << length.output;
  KilnRun longer = run_kiln(base + (dir_ / "d").string() + " --block_size 16 --keep_linebreaks", dir_.path());
  ASSERT_EQ(longer.status, 0) << longer.output;
  EXPECT_EQ(examples(block.output), examples(length.output));
  EXPECT_GT(examples(block.output), examples(longer.output));
  // --block_size is --max_seq_length: both at once is an error.
  KilnRun both = run_kiln(base + (dir_ / "c").string() + " --block_size 8 --max_seq_length 8", dir_.path());
  EXPECT_EQ(both.status, 1);
  EXPECT_CONTAINS(both.output, "--block_size and --max_seq_length name the same setting");
}

TEST_F(HfFlags, Seq2SeqSummarizationColumnsAndSavedSourcePrefix) {
  KilnRun r = run_kiln("train --task seq2seq --config_name t5-tiny --tokenizer_name " + data().string() +
                           " --train_file " + (data() / "train.csv").string() +
                           " --text_column sentence --summary_column label --source_prefix 'sentiment: '" +
                           " --max_source_length 32 --max_target_length 4 --max_steps 2 --save_strategy no" +
                           " --do_predict --test_file " + (data() / "validation.csv").string() +
                           " --max_predict_samples 8 --predict_with_generate --output_dir " + (dir_ / "t5").string(),
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  // run_summarization's scores of the generated text (the metric code is checked against rouge_score and sacrebleu
  // in test_train).
  const auto scores = read_json_file(dir_ / "t5" / "predict_results.json");
  for (const char* k : {"predict_rouge1", "predict_rouge2", "predict_rougeL", "predict_bleu"}) {
    ASSERT_TRUE(scores.contains(k)) << k << " " << scores.dump();
    EXPECT_GE(scores[k].get<double>(), 0.0);
    EXPECT_LE(scores[k].get<double>(), 100.0);
  }
  EXPECT_EQ(r.output.find("warning"), std::string::npos) << r.output;
  const auto config = read_json_file(dir_ / "t5" / "config.json");
  EXPECT_EQ(config["task_specific_params"]["summarization"]["prefix"], "sentiment: ");
  // eval reads the same columns with the saved prefix.
  r = run_kiln("eval --model_name_or_path " + (dir_ / "t5").string() + " --validation_file " +
                   (data() / "validation.csv").string() + " --text_column sentence --summary_column label" +
                   " --max_source_length 32 --max_target_length 4 --max_eval_samples 16",
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "eval_loss = ");
}

TEST_F(HfFlags, ProgressLinesForTrainingAndEvaluation) {
  KilnRun r = train_classifier("out", " --disable_tqdm false --eval_strategy steps --eval_steps 4 --validation_file " +
                                          (data() / "validation.csv").string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "100% | step 4/4 | epoch ");
  EXPECT_CONTAINS(r.output, "eval 100% | batch 75/75 | ");
  EXPECT_CONTAINS(r.output, "samples/s | ETA 0:00:00\n");
  // Off by default when the output is not a terminal.
  r = train_classifier("out2");
  EXPECT_EQ(r.output.find("samples/s | ETA"), std::string::npos) << r.output;
}

// HF's total_flos: 6 x input tokens x parameters outside the embeddings. transformers' own
// BertForSequenceClassification(demo config).num_parameters(exclude_embeddings=True) is 71362; one step of
// 8 rows padded to 16 tokens is 6 x 128 x 71362.
TEST_F(HfFlags, TotalFlosAsHfCountsThem) {
  ASSERT_EQ(train_classifier("out", " --pad_to_max_length --max_steps 1").status, 0);
  EXPECT_EQ(read_json_file(dir_ / "out" / "trainer_state.json")["total_flos"], 6.0 * 128 * 71362);
  EXPECT_EQ(read_json_file(dir_ / "out" / "train_results.json")["total_flos"], 6.0 * 128 * 71362);
}

TEST_F(HfFlags, OutputDirectoryAsHfLeavesIt) {
  ASSERT_EQ(train_classifier("base").status, 0);
  KilnRun r = run_kiln("train --model_name_or_path " + (dir_ / "base").string() + tokenizer_and_data() +
                           " --validation_file " + (data() / "validation.csv").string() +
                           " --max_steps 4 --eval_strategy steps --eval_steps 2 --logging_steps 1 --save_strategy no" +
                           " --learning_rate 3e-5 --output_dir " + (dir_ / "out").string(),
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string card = read_file(dir_ / "out" / "README.md");
  EXPECT_EQ(card.rfind("---\nlibrary_name: kiln\nbase_model: \"" + (dir_ / "base").string() + "\"\n", 0), 0u) << card;
  EXPECT_CONTAINS(card, "- generated_from_trainer\n- text-classification\n");
  EXPECT_CONTAINS(card, "on train.csv.\nIt achieves the following results on the evaluation set (validation.csv):\n"
                        "- Loss: ");
  EXPECT_CONTAINS(card, "- learning_rate: 3e-05\n- train_batch_size: 8\n");
  EXPECT_CONTAINS(card, "- training_steps: 4\n");
  // One row per evaluation during training, not the final one again.
  EXPECT_CONTAINS(card, "| Training Loss | Epoch | Step | Validation Loss | Accuracy | F1 |\n");
  EXPECT_EQ(count(card, "\n| "), 3u) << card;
  const auto special = read_json_file(dir_ / "out" / "special_tokens_map.json");
  EXPECT_EQ(special["cls_token"], "[CLS]");
  EXPECT_EQ(special["mask_token"], "[MASK]");
  EXPECT_FALSE(fs::exists(dir_ / "out" / "generation_config.json"));  // a classifier does not generate
  // A language model gets HF's generation_config.json from its config's token ids.
  ASSERT_EQ(run_kiln("train --task causal-lm --config_name gpt2-tiny" + tokenizer_and_data() +
                         " --max_steps 1 --save_strategy no --output_dir " + (dir_ / "lm").string(),
                     dir_.path())
                .status,
            0);
  const auto g = read_json_file(dir_ / "lm" / "generation_config.json");
  const auto config = read_json_file(dir_ / "lm" / "config.json");
  EXPECT_EQ(g["_from_model_config"], true);
  EXPECT_EQ(g["eos_token_id"], config["eos_token_id"]);
  EXPECT_EQ(g["bos_token_id"], config["bos_token_id"]);
}

// datasets' JSON with a field, and a compressed file: as HF's loaders read them.
TEST_F(HfFlags, JsonFieldAndCompressedData) {
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < 32; ++i)
    rows.push_back({{"sentence", i % 2 ? "the battery is great" : "the screen is bad"},
                    {"label", i % 2 ? "positive" : "negative"}});
  io::write_json_file_atomic(dir_ / "train.json", {{"version", "1"}, {"data", rows}});
  const std::string train = "train --config_name " + (data() / "model_config.json").string() + " --tokenizer_name " +
                            data().string() + " --max_seq_length 16 --max_steps 1 --save_strategy no --output_dir ";
  KilnRun r = run_kiln(train + (dir_ / "a").string() + " --train_file " + (dir_ / "train.json").string() +
                           " --train_file_field data",
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, " 32 examples");
  r = run_kiln(train + (dir_ / "b").string() + " --train_file " + (dir_ / "train.json").string() +
                   " --train_file_field rows",
               dir_.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "train.json: no field 'rows' (keys: data, version)");
  ASSERT_EQ(std::system(("gzip -c " + (data() / "train.csv").string() + " > " + (dir_ / "train.csv.gz").string()).c_str()), 0);
  r = run_kiln(train + (dir_ / "c").string() + " --train_file " + (dir_ / "train.csv.gz").string(), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, " 3000 examples");
}

}  // namespace
}  // namespace kiln
