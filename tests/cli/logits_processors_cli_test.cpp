// The logits-processor and warper flags of kiln generate (--suppress_tokens,
// --bad_words_ids, --sequence_bias, --forced_bos_token_id, ...): they print
// what models::generate gives with the same settings, a model's
// generation_config.json supplies them, the flags win over it, and bad
// values are errors naming the flag.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "kiln/core/file.h"
#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "kiln/tokenizers/tokenizer.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

constexpr const char* kPrompts[] = {"summarize: the battery lasts all day", "hello there"};

class LogitsProcessorsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path tokenizer = fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small";
    if (!fs::exists(tokenizer)) GTEST_SKIP() << "no " << tokenizer;
    model_ = dir_ / "t5";
    ASSERT_EQ(run_kiln("init --config t5-tiny --output_dir " + model_.string(), dir_.path()).status, 0);
    for (const char* f : {"spiece.model", "tokenizer.json"}) fs::copy_file(tokenizer / f, model_ / f);
    std::ofstream(dir_ / "prompts.txt") << kPrompts[0] << "\n" << kPrompts[1] << "\n";
  }
  std::string generate(const std::string& flags) const {
    return "generate --model " + model_.string() + " --prompts_file " + (dir_ / "prompts.txt").string() +
           " --max_new_tokens 6 " + flags;
  }
  // What the library prints for the two prompts with g.
  std::string expected(const models::GenerationConfig& g) const {
    auto model = models::from_pretrained(model_);
    auto tok = tokenizers::Tokenizer::from_pretrained(model_.string());
    std::vector<std::vector<int64_t>> ids;
    for (const char* p : kPrompts) {
      auto e = tok.encode(p);
      ids.emplace_back(e.ids.begin(), e.ids.end());
    }
    std::string out;
    for (const auto& seq : models::generate(*model, ids, g))
      out += tok.decode(std::vector<uint32_t>(seq.begin(), seq.end()), true) + "\n";
    return out;
  }
  testing::TempDir dir_;
  fs::path model_;
};

models::GenerationConfig processor_settings(int64_t num_beams) {
  models::GenerationConfig g;
  g.max_new_tokens = 6;
  g.num_beams = num_beams;
  g.suppress_tokens = {3, 5};
  g.begin_suppress_tokens = {6};
  g.bad_words_ids = {{7}, {8, 9}};
  g.sequence_bias = {{{10}, 2.5}, {{11, 12}, -1.0}};
  g.forced_bos_token_id = 13;
  g.forced_eos_token_ids = {1};
  g.exponential_decay_length_penalty = std::make_pair(int64_t{2}, 1.5);
  g.renormalize_logits = true;
  g.remove_invalid_values = true;
  return g;
}

TEST_F(LogitsProcessorsCli, FlagsAsTheLibraryAndFromGenerationConfig) {
  const std::string flags =
      "--suppress_tokens 3,5 --begin_suppress_tokens 6 --bad_words_ids '[[7], [8, 9]]' "
      "--sequence_bias '[[[10], 2.5], [[11, 12], -1.0]]' --forced_bos_token_id 13 --forced_eos_token_id 1 "
      "--exponential_decay_length_penalty 2,1.5 --renormalize_logits --remove_invalid_values";
  for (int64_t beams : {1, 2}) {
    const auto run = run_kiln(generate(flags + " --num_beams " + std::to_string(beams)), dir_.path());
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(run.output, expected(processor_settings(beams))) << "num_beams " << beams;
  }
  // The same settings from generation_config.json, in its form.
  auto config = read_json_file(model_ / "generation_config.json");
  const nlohmann::json settings = nlohmann::json::parse(R"({"suppress_tokens": [3, 5], "begin_suppress_tokens": [6],
      "bad_words_ids": [[7], [8, 9]], "sequence_bias": [[[10], 2.5], [[11, 12], -1.0]], "forced_bos_token_id": 13,
      "forced_eos_token_id": [1], "exponential_decay_length_penalty": [2, 1.5], "renormalize_logits": true,
      "remove_invalid_values": true})");
  config.update(settings);
  std::ofstream(model_ / "generation_config.json") << config.dump(2);
  const auto from_file = run_kiln(generate("--num_beams 2"), dir_.path());
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_EQ(from_file.output.find("not applied"), std::string::npos) << from_file.output;
  EXPECT_EQ(from_file.output, expected(processor_settings(2)));
  // Flags win over the file ("" clears a list; false a switch).
  const auto over = run_kiln(generate("--num_beams 2 --forced_bos_token_id 14 --suppress_tokens '' "
                                      "--renormalize_logits false"),
                             dir_.path());
  ASSERT_EQ(over.status, 0) << over.output;
  models::GenerationConfig g = processor_settings(2);
  g.forced_bos_token_id = 14;
  g.suppress_tokens.clear();
  g.renormalize_logits = false;
  EXPECT_EQ(over.output, expected(g));
}

// kiln predict takes the same flags and generates as kiln generate does with them.
TEST_F(LogitsProcessorsCli, PredictTakesTheFlags) {
  const std::string flags = " --max_new_tokens 6 --num_beams 2 --suppress_tokens 3,5 --bad_words_ids '[[7], [8, 9]]' "
                            "--sequence_bias '[[[10], 2.5]]' --forced_bos_token_id 13 --renormalize_logits";
  const fs::path test = dir_.write("t.txt", std::string(kPrompts[0]) + "\n");
  const auto p = run_kiln("predict --model " + model_.string() + " --test_file " + test.string() + " --output " +
                              (dir_ / "p.jsonl").string() + flags,
                          dir_.path());
  ASSERT_EQ(p.status, 0) << p.output;
  const auto g = run_kiln("generate --model " + model_.string() + " --prompt '" + kPrompts[0] + "'" + flags,
                          dir_.path());
  ASSERT_EQ(g.status, 0) << g.output;
  const auto row = nlohmann::json::parse(read_file(dir_ / "p.jsonl"));
  EXPECT_EQ(row["generated_text"].get<std::string>() + "\n", g.output);
  const auto plain = run_kiln("generate --model " + model_.string() + " --prompt '" + kPrompts[0] +
                                  "' --max_new_tokens 6 --num_beams 2",
                              dir_.path());
  EXPECT_NE(plain.output, g.output) << "the processors change nothing on this model";
}

TEST_F(LogitsProcessorsCli, BadValuesNameTheFlag) {
  auto fails = [&](const std::string& flags, const std::string& message) {
    const auto run = run_kiln(generate(flags), dir_.path());
    EXPECT_NE(run.status, 0) << flags;
    EXPECT_NE(run.output.find(message), std::string::npos) << flags << ": " << run.output;
  };
  fails("--bad_words_ids 5,6", "generate: --bad_words_ids: \"bad_words_ids\" must be a list of token-id lists");
  fails("--sequence_bias '[[[5], -2.0]'", "generate: --sequence_bias: '[[[5], -2.0]' is not valid JSON");
  fails("--sequence_bias '[[5, -2.0]]'", "\"sequence_bias\" must be a list of [[token ids], bias] pairs");
  fails("--suppress_tokens 5,x", "generate: --suppress_tokens: invalid value 'x' (expected an integer)");
  fails("--exponential_decay_length_penalty 2", "must be [start_index, decay_factor]");
  fails("--forced_bos_token_id -3", "--forced_bos_token_id must be >= 0");
  fails("--forced_eos_token_id 40000", "forced_eos_token_id holds token id 40000, outside the vocabulary");
  fails("--do_sample --typical_p 1.5", "typical_p must be in (0, 1] (1 = off), got 1.5");
  fails("--do_sample --eta_cutoff abc", "--eta_cutoff: invalid value 'abc' (expected a number)");
  const auto greedy = run_kiln(generate("--typical_p 0.5"), dir_.path());
  EXPECT_EQ(greedy.status, 0) << greedy.output;
  EXPECT_NE(greedy.output.find("--typical_p only applies with --do_sample"), std::string::npos) << greedy.output;
}

}  // namespace
}  // namespace kiln
