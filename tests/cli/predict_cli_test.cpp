// kiln predict with a seq2seq model: --max_new_tokens N gives N new tokens and --generation_max_length N gives
// N - 1 (Seq2SeqTrainer's generate max_length counts T5's decoder start token), the rule kiln train's
// --predict_with_generate follows, so both write the same texts.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "support/run_kiln.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using testing::run_kiln;

class PredictCli : public ::testing::Test {
 protected:
  std::string path(const std::string& f) const { return (dir_.path() / f).string(); }
  // The generated_text of each line of a kiln predict output.
  std::vector<std::string> generated(const std::string& file) const {
    std::vector<std::string> texts;
    std::ifstream in(path(file));
    for (std::string line; std::getline(in, line);) texts.push_back(nlohmann::json::parse(line)["generated_text"]);
    return texts;
  }
  std::vector<std::string> lines(const std::string& file) const {
    std::vector<std::string> out;
    std::ifstream in(path(file));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  testing::KilnRun predict(const std::string& flags) const {
    return run_kiln("predict --model " + path("t5") + " --input " + path("src.txt") + " " + flags, dir_.path());
  }
  testing::TempDir dir_;
};

TEST_F(PredictCli, GenerationMaxLengthCountsTheDecoderStartToken) {
  const fs::path tokenizer = fs::path(KILN_SHARED_DIR) / "tokenizers" / "t5-small";
  SKIP_WITHOUT_SHARED(tokenizer.string());
  ASSERT_EQ(run_kiln("init --config t5-tiny --output_dir " + path("t5-init"), dir_.path()).status, 0);
  for (const char* f : {"spiece.model", "tokenizer.json"}) fs::copy_file(tokenizer / f, dir_.path() / "t5-init" / f);
  {  // a few steps on one pattern, so that the model writes several words before </s>
    std::ofstream rows(path("pairs.jsonl")), sources(path("src.txt"));
    for (int i = 0; i < 32; ++i)
      rows << R"({"source": "the battery lasts all day number )" << i << R"(", "target": "battery lasts day )" << i
           << " good\"}\n";
    sources << "the battery lasts all day number 3\nhello there\n";
  }
  std::ofstream(path("test.jsonl")) << R"({"source": "the battery lasts all day number 3", "target": "x"})" << "\n"
                                    << R"({"source": "hello there", "target": "y"})" << "\n";
  auto r = run_kiln("train --task seq2seq --model_name_or_path " + path("t5-init") + " --train_file " +
                        path("pairs.jsonl") + " --max_steps 40 --learning_rate 1e-2 --per_device_train_batch_size 8" +
                        " --save_strategy no --seed 3 --do_predict --test_file " + path("test.jsonl") +
                        " --predict_with_generate --generation_max_length 5 --output_dir " + path("t5"),
                    dir_.path());
  ASSERT_EQ(r.status, 0) << r.output;

  for (const auto& [out, flags] : std::vector<std::pair<std::string, std::string>>{
           {"gml5.jsonl", "--generation_max_length 5"}, {"new4.jsonl", "--max_new_tokens 4"},
           {"new5.jsonl", "--max_new_tokens 5"}, {"gml1.jsonl", "--generation_max_length 1"}}) {
    r = predict(flags + " --output " + path(out));
    ASSERT_EQ(r.status, 0) << flags << ": " << r.output;
  }
  EXPECT_EQ(generated("gml5.jsonl"), generated("new4.jsonl"));
  EXPECT_NE(generated("gml5.jsonl"), generated("new5.jsonl")) << "the model stops before 5 tokens: no test";
  EXPECT_EQ(generated("gml1.jsonl"), (std::vector<std::string>{"", ""}));
  // kiln train --do_predict --predict_with_generate with the same generation_max_length writes the same texts.
  EXPECT_EQ(generated("gml5.jsonl"), lines("t5/generated_predictions.txt"));

  r = predict("--generation_max_length 5 --max_new_tokens 4 --output " + path("both.jsonl"));
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "--max_new_tokens N (N new tokens) and --generation_max_length N (N - 1 new tokens");
  r = predict("--generation_max_length 0 --output " + path("zero.jsonl"));
  EXPECT_NE(r.status, 0);
  EXPECT_CONTAINS(r.output, "--generation_max_length must be >= 1, got 0");
}

}  // namespace
}  // namespace kiln
