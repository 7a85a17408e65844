// kiln train --task sft end to end on tests/goldens/sft (a tiny Llama from
// scratch with the small ChatML tokenizer): assistant-only loss trains and the
// loss falls, causal-lm detects conversational data, packing runs (each of
// TRL's strategies) and reports its rows, kiln generate --chat answers from the saved model, and bad
// combinations are one-line errors.
#include <regex>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/json.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::KilnRun;
using testing::run_kiln;

const std::string kSft = std::string(KILN_TEST_DATA_DIR) + "/sft/";

class Sft : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.write("config.json", R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "max_position_embeddings": 256, "vocab_size": 384, "rms_norm_eps": 1e-6, "tie_word_embeddings": false})");
  }
  std::string train(const std::string& file, const std::string& out, const std::string& extra) const {
    return "train --config_name " + (dir_ / "config.json").string() + " --tokenizer_name " + kSft + "tokenizer" +
           " --train_file " + kSft + file + " --per_device_train_batch_size 8 --logging_steps 1 --seed 1" +
           " --output_dir " + (dir_ / out).string() + " " + extra;
  }
  testing::TempDir dir_;
};

// The first and last logged training losses.
std::pair<double, double> first_last_loss(const fs::path& out) {
  const auto state = read_json_file(out / "trainer_state.json");
  std::vector<double> losses;
  for (const auto& e : state["log_history"])
    if (e.contains("loss")) losses.push_back(e["loss"].get<double>());
  EXPECT_GE(losses.size(), 2u);
  return {losses.front(), losses.back()};
}

TEST_F(Sft, AssistantOnlyLossTrainsAndGenerateChatAnswers) {
  KilnRun r = run_kiln(train("chat.jsonl", "out", "--task sft --assistant_only_loss --max_steps 60 --learning_rate 3e-3"),
                       dir_.path(), 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "conversational data, 24 examples");
  const auto [first, last] = first_last_loss(dir_ / "out");
  EXPECT_LT(last, first * 0.5) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "out" / "tokenizer_config.json"));
  KilnRun g = run_kiln("generate --model " + (dir_ / "out").string() + " --chat --prompt 'Double 3?' --max_new_tokens 12",
                       dir_.path());
  ASSERT_EQ(g.status, 0) << g.output;
  EXPECT_CONTAINS(g.output, "doubled is");  // the trained answering style
  EXPECT_EQ(g.output.find("<|im_start|>"), std::string::npos) << g.output;  // the reply alone
}

TEST_F(Sft, CausalLmDetectsConversationsAndPacks) {
  KilnRun r = run_kiln(train("chat.jsonl", "out", "--task causal-lm --packing --max_length 128 --max_steps 2"),
                       dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_CONTAINS(r.output, "training as --task sft");
  EXPECT_CONTAINS(r.output, "packed (bfd) into");
  for (const char* strategy : {"bfd_split", "wrapped"}) {
    r = run_kiln(train("chat.jsonl", std::string("out_") + strategy,
                       std::string("--task sft --packing --packing_strategy ") + strategy + " --max_length 12 --max_steps 2"),
                 dir_.path());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_CONTAINS(r.output, std::string("packed (") + strategy + ") into");
    // Both padding shares are shares: splitting strategies keep the tokens the unpacked side cuts at 12.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(: ([-0-9.]+)% padding, against ([-0-9.]+)% for the)")))
        << r.output;
    for (int i : {1, 2}) {
      EXPECT_GE(std::stod(m[i]), 0.0) << r.output;
      EXPECT_LT(std::stod(m[i]), 100.0) << r.output;
    }
  }
}

// TRL's eval_packing: the evaluation file packs as it says, else as --packing does.
TEST_F(Sft, EvalPackingDecidesForTheEvaluationFile) {
  const std::string eval = " --validation_file " + kSft + "chat.jsonl --do_eval --max_length 128 --max_steps 1";
  auto packed_lines = [](const std::string& out) {
    int n = 0;
    for (size_t at = out.find("packed (bfd) into"); at != std::string::npos; at = out.find("packed (bfd) into", at + 1))
      ++n;
    return n;
  };
  KilnRun r = run_kiln(train("chat.jsonl", "both", "--task sft --packing" + eval), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(packed_lines(r.output), 2) << r.output;  // training and evaluation files
  r = run_kiln(train("chat.jsonl", "train_only", "--task sft --packing --eval_packing false" + eval), dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(packed_lines(r.output), 1) << r.output;
  r = run_kiln(train("chat.jsonl", "eval_only", "--task sft --eval_packing true --packing_strategy bfd" + eval),
               dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(packed_lines(r.output), 1) << r.output;
  EXPECT_EQ(r.output.find("--packing_strategy bfd applies"), std::string::npos) << r.output;
  r = run_kiln(train("chat.jsonl", "bad", "--task sft --eval_packing maybe" + eval), dir_.path());
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_CONTAINS(r.output, "--eval_packing must be true or false, got 'maybe'");
}

TEST_F(Sft, PromptCompletionTrains) {
  for (const char* file : {"prompt_completion.jsonl", "prompt_completion_text.jsonl"}) {
    KilnRun r = run_kiln(train(file, std::string("out_") + file, "--task sft --max_steps 2"), dir_.path());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_CONTAINS(r.output, "prompt-completion data");
  }
}

TEST_F(Sft, BadCombinationsAreClearErrors) {
  KilnRun r = run_kiln(train("prompt_completion_text.jsonl", "e1", "--task sft --assistant_only_loss --max_steps 1"),
                       dir_.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "--assistant_only_loss is for conversational data");
  // A tokenizer whose template has no generation blocks.
  fs::create_directories(dir_ / "plain");
  fs::copy_file(kSft + "tokenizer/tokenizer.json", dir_ / "plain" / "tokenizer.json");
  dir_.write("plain/tokenizer_config.json", R"({"eos_token": "<|im_end|>", "chat_template":
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"})");
  r = run_kiln("train --config_name " + (dir_ / "config.json").string() + " --tokenizer_name " +
                   (dir_ / "plain").string() + " --task sft --assistant_only_loss --train_file " + kSft +
                   "chat.jsonl --max_steps 1 --output_dir " + (dir_ / "e2").string(),
               dir_.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "has no {% generation %} blocks");
  r = run_kiln(train("chat.jsonl", "e3", "--task sft --completion_only_loss maybe --max_steps 1"), dir_.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "--completion_only_loss must be true or false");
  r = run_kiln(train("chat.jsonl", "e4", "--task sft --packing --packing_strategy ffd --max_steps 1"), dir_.path());
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.output, "--packing_strategy must be one of bfd, bfd_split, wrapped (TRL's), got 'ffd'");
}

}  // namespace
}  // namespace kiln
