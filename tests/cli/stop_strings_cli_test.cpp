// kiln generate's --stop_strings and --max_time (and the encoder processors'
// flags): what models::generate gives with the same settings, the model's
// generation_config.json supplies them, and bad values are errors naming the
// flag. The tiny GPT-2 golden model with the byte-level tokenizer of
// tests/goldens/stop_strings.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kiln/models/generation.h"
#include "kiln/models/stopping_criteria.h"
#include "kiln/tokenizers/tokenizer.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

constexpr const char* kPrompt = "the stop";

class StopStringsCli : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_ / "gpt2";
    fs::create_directories(model_);
    const fs::path goldens(KILN_TEST_DATA_DIR);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(goldens / "gpt2/gpt2_lm" / f, model_ / f);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(goldens / "stop_strings/byte_level" / f, model_ / f);
  }
  std::string generate(const std::string& flags) const {
    return "generate --model " + model_.string() + " --prompt '" + kPrompt + "' --max_new_tokens 12 " + flags;
  }
  // What the library prints for the prompt with g (stop strings read through the model's tokenizer).
  std::string expected(models::GenerationConfig g) const {
    auto model = models::from_pretrained(model_);
    auto tok = tokenizers::Tokenizer::from_pretrained(model_.string());
    if (!g.stop_strings.empty())
      g.stop_string_matcher = std::make_shared<const models::StopStrings>(
          models::StopStrings::from_tokenizer(g.stop_strings, tok, model_));
    const auto e = tok.encode(kPrompt, false);
    const auto out = models::generate(*model, {std::vector<int64_t>(e.ids.begin(), e.ids.end())}, g);
    return tok.decode(std::vector<uint32_t>(out[0].begin(), out[0].end()), true) + "\n";
  }
  testing::TempDir dir_;
  fs::path model_;
};

TEST_F(StopStringsCli, FlagsAsTheLibraryAndFromGenerationConfig) {
  models::GenerationConfig g;
  g.max_new_tokens = 12;
  const std::string plain = expected(g);
  const auto run = run_kiln(generate(""), dir_.path());
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_EQ(run.output, plain);
  // A stop string from the middle of the continuation: the output stops there, shorter.
  const std::string stop = plain.substr(std::string(kPrompt).size() + 4, 2);
  g.stop_strings = {"zzzz", stop};
  const std::string stopped = expected(g);
  EXPECT_LT(stopped.size(), plain.size());
  for (const std::string& flag : {"--stop_strings '[\"zzzz\", \"" + stop + "\"]'"}) {
    const auto r = run_kiln(generate(flag + " --num_beams 1"), dir_.path());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(r.output, stopped) << flag;
  }
  g.stop_strings = {stop};
  const auto one = run_kiln(generate("--stop_strings '" + stop + "'"), dir_.path());
  ASSERT_EQ(one.status, 0) << one.output;
  EXPECT_EQ(one.output, expected(g));
  // From generation_config.json, with the encoder processors; --max_time over it.
  std::ofstream(model_ / "generation_config.json")
      << nlohmann::json({{"stop_strings", stop}, {"encoder_repetition_penalty", 0.5},
                         {"encoder_no_repeat_ngram_size", 2}}).dump();
  g.encoder_repetition_penalty = 0.5;
  g.encoder_no_repeat_ngram_size = 2;
  const auto from_file = run_kiln(generate(""), dir_.path());
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_EQ(from_file.output.find("warning"), std::string::npos) << from_file.output;
  EXPECT_EQ(from_file.output, expected(g));
  const auto cleared = run_kiln(generate("--stop_strings ''"), dir_.path());  // "" clears the file's
  ASSERT_EQ(cleared.status, 0) << cleared.output;
  g.stop_strings.clear();
  EXPECT_EQ(cleared.output, expected(g));
  const auto flags = run_kiln(generate("--encoder_repetition_penalty 1 --encoder_no_repeat_ngram_size 0 "
                                       "--stop_strings zzzz --max_time 0"), dir_.path());
  ASSERT_EQ(flags.status, 0) << flags.output;
  models::GenerationConfig first;
  first.max_new_tokens = 1;
  EXPECT_EQ(flags.output, expected(first));  // max_time 0: one new token
}

TEST_F(StopStringsCli, BadValuesAreErrors) {
  const auto list = run_kiln(generate("--stop_strings '[\"a\", 3]'"), dir_.path());
  EXPECT_NE(list.status, 0);
  EXPECT_CONTAINS(list.output, "generate: --stop_strings: \"stop_strings\" must be a string or a list of strings");
  const auto json = run_kiln(generate("--stop_strings '[\"a\"'"), dir_.path());
  EXPECT_NE(json.status, 0);
  EXPECT_CONTAINS(json.output, "--stop_strings: '[\"a\"' is not valid JSON");
  const auto time = run_kiln(generate("--max_time -1"), dir_.path());
  EXPECT_NE(time.status, 0);
  EXPECT_CONTAINS(time.output, "max_time must be a number of seconds >= 0, got -1");
  const auto penalty = run_kiln(generate("--encoder_repetition_penalty 0"), dir_.path());
  EXPECT_NE(penalty.status, 0);
  EXPECT_CONTAINS(penalty.output, "encoder_repetition_penalty must be a positive number, got 0");
}

}  // namespace
}  // namespace kiln
