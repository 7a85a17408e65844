// kiln train --use_peft end to end: the output and checkpoints hold PEFT's
// adapter files with the adapter's optimizer state, a resumed run equals the
// straight one bit for bit, and forward / eval / predict / merge read the
// adapter (--adapter, or an adapter directory as --model).
#include <gtest/gtest.h>

#include <algorithm>
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
using nlohmann::json;
using testing::run_kiln;

std::string bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

class LoraCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(run_kiln("demo-data --output_dir " + (dir_.path() / "data").string(), dir_.path()).status, 0);
    // A small base model to adapt (two steps of full training from fresh weights).
    auto r = run_kiln("train --config_name " + data("model_config.json") + " --tokenizer_name " + data("") +
                          " --train_file " + data("train.csv") + " --max_seq_length 32 --pad_to_max_length" +
                          " --per_device_train_batch_size 16 --max_steps 2 --seed 3 --output_dir " + path("base"),
                      dir_.path());
    ASSERT_EQ(r.status, 0) << r.output;
  }
  std::string data(const std::string& f) const { return (dir_.path() / "data" / f).string(); }
  std::string path(const std::string& f) const { return (dir_.path() / f).string(); }
  std::string lora_train(const std::string& out, const std::string& extra = "") const {
    return "train --model_name_or_path " + path("base") + " --train_file " + data("train.csv") +
           " --max_seq_length 32 --pad_to_max_length --per_device_train_batch_size 8 --learning_rate 1e-3 --seed 3" +
           " --use_peft --lora_r 4 --lora_target_modules query,value --max_steps 6 --save_steps 3 --output_dir " +
           path(out) + " " + extra;
  }
  std::string forward(const std::string& model_args) const {
    std::ofstream(path("in.json")) << R"({"input_ids": [[2, 100, 200, 3], [2, 250, 3, 0]]})";
    auto r = run_kiln("forward " + model_args + " --inputs " + path("in.json") + " --output " + path("out.json"),
                      dir_.path());
    EXPECT_EQ(r.status, 0) << r.output;
    return bytes(path("out.json"));
  }
  void variant_trains_resumes_and_merges(const std::string& name, const std::string& variant,
                                         const std::string& config_key, const json& want, const std::string& key);
  testing::TempDir dir_;
};

TEST_F(LoraCli, TrainWritesAdaptersAndResumesExactly) {
  auto r = run_kiln(lora_train("lora"), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* dir : {"lora", "lora/checkpoint-3", "lora/checkpoint-6"}) {
    EXPECT_TRUE(fs::exists(dir_.path() / dir / "adapter_config.json")) << dir;
    EXPECT_TRUE(fs::exists(dir_.path() / dir / "adapter_model.safetensors")) << dir;
    EXPECT_FALSE(fs::exists(dir_.path() / dir / "model.safetensors")) << dir << ": the full model is not saved";
  }
  json config = read_json_file(dir_.path() / "lora" / "adapter_config.json");
  EXPECT_EQ(config["peft_type"], "LORA");
  EXPECT_EQ(config["task_type"], "SEQ_CLS");
  EXPECT_EQ(config["r"], 4);
  EXPECT_EQ(config["lora_alpha"], 32);  // TRL's default
  EXPECT_EQ(config["lora_dropout"], 0.05);
  EXPECT_EQ(config["target_modules"], json({"query", "value"}));
  EXPECT_EQ(config["modules_to_save"], json({"classifier", "score"}));
  EXPECT_EQ(config["base_model_name_or_path"], fs::absolute(path("base")).lexically_normal().string());
  // The optimizer state is the adapter's and the classifier's only.
  auto opt = io::SafetensorsFile::open(dir_.path() / "lora" / "checkpoint-3" / "optimizer.safetensors");
  int lora = 0;
  for (const auto& e : opt.entries()) {
    const bool trained = e.name.find(".lora_") != std::string::npos || e.name.find("classifier.") != std::string::npos;
    EXPECT_TRUE(trained) << e.name;
    lora += e.name.find(".lora_") != std::string::npos;
  }
  EXPECT_EQ(lora, 2 * 2 * 2 * 2);  // 2 layers × (query, value) × (A, B) × (exp_avg, exp_avg_sq)
  // Resuming from checkpoint-3 gives the straight run's adapter, bit for bit.
  fs::create_directories(dir_.path() / "resumed");
  fs::copy(dir_.path() / "lora" / "checkpoint-3", dir_.path() / "resumed" / "checkpoint-3");
  r = run_kiln(lora_train("resumed", "--overwrite_output_dir --resume_from_checkpoint " + path("resumed/checkpoint-3")),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bytes(path("resumed/adapter_model.safetensors")), bytes(path("lora/adapter_model.safetensors")));
  // The checkpoint holds an adapter: resuming it as a full fine-tune is refused.
  r = run_kiln("train --model_name_or_path " + path("base") + " --train_file " + data("train.csv") +
                   " --max_seq_length 32 --pad_to_max_length --max_steps 6 --output_dir " + path("resumed") +
                   " --overwrite_output_dir --resume_from_checkpoint " + path("resumed/checkpoint-3"),
               dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "holds a LoRA adapter (a --use_peft run)");
  // Nor into an adapter of other settings: the run would not continue the one it resumes.
  r = run_kiln(lora_train("resumed", "--lora_alpha 16 --overwrite_output_dir --resume_from_checkpoint " +
                                         path("resumed/checkpoint-3")),
               dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "adapter_config.json: 'lora_alpha' is 32, but this run's adapter has 16");
}

// LoRA on the word embeddings (PEFT's lora.Embedding): A starts at zero, so
// a trained adapter whose A moved got its gradient through the lookup; the
// embedding branch resumes exactly and merges into the table.
TEST_F(LoraCli, EmbeddingAdapterTrainsResumesAndMerges) {
  const std::string targets = "--lora_target_modules word_embeddings,query --max_steps 4 --save_steps 2";
  auto r = run_kiln(lora_train("emb", targets), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  auto adapter = io::load_safetensors(dir_.path() / "emb" / "adapter_model.safetensors");
  const std::string a_key = "base_model.model.bert.embeddings.word_embeddings.lora_embedding_A";
  ASSERT_TRUE(adapter.count(a_key));
  ASSERT_TRUE(adapter.count("base_model.model.bert.embeddings.word_embeddings.lora_embedding_B"));
  auto a = adapter.at(a_key).to_vector<double>();
  EXPECT_TRUE(std::any_of(a.begin(), a.end(), [](double v) { return v != 0; }));
  json config = read_json_file(dir_.path() / "emb" / "adapter_config.json");
  EXPECT_EQ(config["target_modules"], json({"word_embeddings", "query"}));
  fs::create_directories(dir_.path() / "emb_resumed");
  fs::copy(dir_.path() / "emb" / "checkpoint-2", dir_.path() / "emb_resumed" / "checkpoint-2");
  r = run_kiln(lora_train("emb_resumed", targets + " --overwrite_output_dir --resume_from_checkpoint " +
                                             path("emb_resumed/checkpoint-2")),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bytes(path("emb_resumed/adapter_model.safetensors")), bytes(path("emb/adapter_model.safetensors")));
  const std::string adapted = forward("--model " + path("emb"));
  EXPECT_NE(adapted, forward("--model " + path("base")));
  r = run_kiln("merge --model " + path("emb") + " --output_dir " + path("emb_merged"), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  json x = json::parse(adapted), y = json::parse(forward("--model " + path("emb_merged")));
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) EXPECT_NEAR(x["logits"][i][j].get<double>(), y["logits"][i][j].get<double>(), 1e-5);
}

// An adapter trained with `variant`'s flags (on top of dropout 0.1, four
// steps, a checkpoint at 2): its config has `config_key` = `want`, its file
// holds `key`, the run resumes exactly, a resume without the flags is refused
// naming `config_key`, and merging keeps the logits.
void LoraCli::variant_trains_resumes_and_merges(const std::string& name, const std::string& variant,
                                                const std::string& config_key, const json& want, const std::string& key) {
  const std::string common = "--lora_dropout 0.1 --max_steps 4 --save_steps 2";
  auto r = run_kiln(lora_train(name, variant + " " + common), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(dir_.path() / name / "adapter_config.json")[config_key], want);
  EXPECT_TRUE(io::load_safetensors(dir_.path() / name / "adapter_model.safetensors").count(key)) << key;
  const std::string resumed = name + "_resumed";
  fs::create_directories(dir_.path() / resumed);
  fs::copy(dir_.path() / name / "checkpoint-2", dir_.path() / resumed / "checkpoint-2");
  const std::string resume = " --overwrite_output_dir --resume_from_checkpoint " + path(resumed + "/checkpoint-2");
  r = run_kiln(lora_train(resumed, variant + " " + common + resume), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bytes(path(resumed + "/adapter_model.safetensors")), bytes(path(name + "/adapter_model.safetensors")));
  r = run_kiln(lora_train(resumed, common + resume), dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "'" + config_key + "' is " + want.dump() + ", but this run's adapter has");
  const std::string adapted = forward("--model " + path(name));
  r = run_kiln("merge --model " + path(name) + " --output_dir " + path(name + "_merged"), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  json x = json::parse(adapted), y = json::parse(forward("--model " + path(name + "_merged")));
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j) EXPECT_NEAR(x["logits"][i][j].get<double>(), y["logits"][i][j].get<double>(), 1e-5);
}

// PEFT's trainable_token_indices (--trainable_token_indices): two rows of
// the word embeddings train as they are, the rest of the table frozen.
TEST_F(LoraCli, TrainableTokensTrainResumeAndMerge) {
  variant_trains_resumes_and_merges(
      "tokens", "--trainable_token_indices 2,100", "trainable_token_indices", json::array({2, 100}),
      "base_model.model.bert.embeddings.word_embeddings.token_adapter.trainable_tokens_delta");
}

// A tokenizer larger than the model's vocabulary (tokens added to it): the
// run resizes the token embeddings as run_clm does, and the adapter holds the
// resized table (under token_adapter.base_layer, the new tokens' rows
// trained), so the base and the adapter alone rebuild the model.
TEST_F(LoraCli, TokensAddedToTheTokenizerResizeTheTableAndTrain) {
  fs::copy(dir_.path() / "base", dir_.path() / "big");
  const int64_t vocab = read_json_file(dir_.path() / "base" / "config.json")["vocab_size"].get<int64_t>();
  std::ofstream(dir_.path() / "big" / "vocab.txt", std::ios::app) << "[NEW1]\n[NEW2]\n";
  const std::string added = std::to_string(vocab) + "," + std::to_string(vocab + 1);
  auto r = run_kiln(lora_train("grown", "--tokenizer_name " + path("big") + " --trainable_token_indices " + added),
                    dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "resizing the token embeddings to " + std::to_string(vocab + 2));
  auto adapter = io::load_safetensors(dir_.path() / "grown" / "adapter_model.safetensors");
  const std::string table = "base_model.model.bert.embeddings.word_embeddings.token_adapter.base_layer.weight";
  ASSERT_TRUE(adapter.count(table));
  EXPECT_EQ(adapter.at(table).dim(0), vocab + 2);
  std::ofstream(path("in.json")) << "{\"input_ids\": [[2, " << vocab + 1 << ", 200, 3]]}";
  r = run_kiln("forward --model " + path("base") + " --adapter " + path("grown") + " --inputs " + path("in.json") +
                   " --output " + path("out.json"),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  // Full fine-tuning resizes too, and saves the larger vocabulary.
  r = run_kiln("train --model_name_or_path " + path("base") + " --tokenizer_name " + path("big") + " --train_file " +
                   data("train.csv") + " --max_seq_length 32 --max_steps 1 --output_dir " + path("full"),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(read_json_file(dir_.path() / "full" / "config.json")["vocab_size"], vocab + 2);
}

// DoRA (--use_dora): the magnitudes train and are saved beside the branches
// (with dropout on, both products read the dropped input).
TEST_F(LoraCli, DoraAdapterTrainsResumesAndMerges) {
  variant_trains_resumes_and_merges("dora", "--use_dora", "use_dora", true,
                                    "base_model.model.bert.encoder.layer.0.attention.self.query.lora_magnitude_vector");
}

// PEFT's bias "all" and lora_bias: every bias trains (an adapted layer's
// saved under base_layer), lora_B has a bias, and merging folds it into the
// layer's bias.
TEST_F(LoraCli, TrainedBiasesAndLoraBiasResumeAndMerge) {
  variant_trains_resumes_and_merges("biases", "--lora_train_bias all --lora_bias", "bias", "all",
                                    "base_model.model.bert.encoder.layer.0.attention.self.query.base_layer.bias");
  auto adapter = io::load_safetensors(dir_.path() / "biases" / "adapter_model.safetensors");
  EXPECT_TRUE(adapter.count("base_model.model.bert.encoder.layer.0.attention.self.query.lora_B.bias"));
  EXPECT_TRUE(adapter.count("base_model.model.bert.encoder.layer.0.attention.output.LayerNorm.bias"));
  EXPECT_EQ(read_json_file(dir_.path() / "biases" / "adapter_config.json")["lora_bias"], true);
}

TEST_F(LoraCli, ForwardEvalPredictAndMergeReadTheAdapter) {
  auto r = run_kiln(lora_train("lora", "--gradient_accumulation_steps 2 --gradient_checkpointing"), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string base = forward("--model " + path("base"));
  const std::string with_flag = forward("--model " + path("base") + " --adapter " + path("lora"));
  const std::string auto_peft = forward("--model " + path("lora"));
  EXPECT_NE(base, with_flag);
  EXPECT_EQ(with_flag, auto_peft);
  // merge_and_unload: a full model with the same logits.
  r = run_kiln("merge --model " + path("lora") + " --output_dir " + path("merged"), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt"})
    EXPECT_TRUE(fs::exists(dir_.path() / "merged" / f)) << f;
  json a = json::parse(with_flag), b = json::parse(forward("--model " + path("merged")));
  for (size_t i = 0; i < 2; ++i)
    for (size_t j = 0; j < 2; ++j)
      EXPECT_NEAR(a["logits"][i][j].get<double>(), b["logits"][i][j].get<double>(), 1e-5);
  for (const auto& key : io::load_safetensors(dir_.path() / "merged" / "model.safetensors"))
    EXPECT_EQ(key.first.find("lora_"), std::string::npos) << key.first;
  r = run_kiln("predict --model " + path("lora") + " --input " + data("test.txt") + " --output " + path("pred.jsonl"),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(bytes(path("pred.jsonl")), "\"label\":");
  r = run_kiln("eval --model_name_or_path " + path("base") + " --adapter " + path("lora") + " --validation_file " +
                   data("validation.csv") + " --max_seq_length 32 --output_dir " + path("ev"),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "eval_accuracy = ");
}

// A bf16 base (kiln init --torch_dtype bfloat16) trains an adapter under
// --bf16 with its weights kept bf16, resumes bit for bit, and the adapter
// reads back onto the base.
TEST_F(LoraCli, TrainsOnABf16BaseAndResumesExactly) {
  auto r = run_kiln("init --config " + path("base/config.json") + " --torch_dtype bfloat16 --output_dir " +
                        path("base16"),
                    dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  int bf16 = 0;
  const auto base16 = io::SafetensorsFile::open(dir_.path() / "base16" / "model.safetensors");
  for (const auto& e : base16.entries()) {
    EXPECT_EQ(e.dtype, "BF16") << e.name;
    bf16 += e.dtype == "BF16";
  }
  EXPECT_GT(bf16, 0);
  auto train = [&](const std::string& out, const std::string& extra) {
    return "train --model_name_or_path " + path("base16") + " --tokenizer_name " + data("") + " --train_file " +
           data("train.csv") + " --max_seq_length 32 --pad_to_max_length --per_device_train_batch_size 8" +
           " --learning_rate 1e-3 --seed 3 --use_peft --lora_r 4 --lora_target_modules all-linear --max_steps 4" +
           " --save_steps 2 --bf16 --gradient_checkpointing --output_dir " + path(out) + " " + extra;
  };
  r = run_kiln(train("lora16", ""), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "train_loss");
  fs::create_directories(dir_.path() / "resumed16");
  fs::copy(dir_.path() / "lora16" / "checkpoint-2", dir_.path() / "resumed16" / "checkpoint-2");
  r = run_kiln(train("resumed16", "--overwrite_output_dir --resume_from_checkpoint " + path("resumed16/checkpoint-2")),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(bytes(path("resumed16/adapter_model.safetensors")), bytes(path("lora16/adapter_model.safetensors")));
  EXPECT_NE(forward("--model " + path("base16")), forward("--model " + path("lora16")));
}

TEST_F(LoraCli, BadInputIsAClearError) {
  std::ofstream(path("in.json")) << R"({"input_ids": [[2, 3]]})";
  auto r = run_kiln(lora_train("x", "--lora_target_modules nothing_here"), dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "match no Linear, Conv1D or Embedding layer");
  EXPECT_CONTAINS(r.output, "bert.encoder.layer.0.attention.self.query");
  r = run_kiln(lora_train("y", "--lora_r 0"), dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "lora_r");
  r = run_kiln("forward --model " + path("base") + " --adapter " + data("") + " --inputs " + path("in.json") +
                   " --output y",
               dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "adapter_config.json is missing");
  fs::create_directories(dir_.path() / "ia3");
  std::ofstream(dir_.path() / "ia3" / "adapter_config.json") << R"({"peft_type": "IA3", "base_model_name_or_path": null})";
  r = run_kiln("forward --model " + path("base") + " --adapter " + path("ia3") + " --inputs " + path("in.json") +
                   " --output " + path("o.json"),
               dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "peft_type 'IA3' is not supported");
  fs::create_directories(dir_.path() / "nobase");
  std::ofstream(dir_.path() / "nobase" / "adapter_config.json") << R"({"peft_type": "LORA", "base_model_name_or_path": null})";
  r = run_kiln("merge --model " + path("nobase") + " --output_dir " + path("m"), dir_.path());
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "'base_model_name_or_path' is null");
}

}  // namespace
}  // namespace kiln
