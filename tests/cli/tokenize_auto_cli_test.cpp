// kiln tokenize end to end on model directories whose tokenizer class
// rebuilds tokenizer.json (tests/goldens/tokenizers/auto/): the ids are
// transformers 5's AutoTokenizer's, with and without special tokens, and a
// bad tokenizer_config.json flag is a one-line error naming the file and key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/core/json.h"
#include "support/run_kiln.h"
#include "support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kAuto = fs::path(KILN_TEST_DATA_DIR) / "tokenizers" / "auto";

// The expected.json texts a line of input can hold, and their entries.
std::vector<std::pair<std::string, json>> one_line_texts(const json& exp) {
  std::vector<std::pair<std::string, json>> out;
  for (size_t i = 0; i < exp["texts"].size(); ++i) {
    const std::string t = exp["texts"][i];
    if (t.find_first_of("\r\n") == std::string::npos) out.emplace_back(t, exp["encode"][i]);
  }
  return out;
}

std::vector<json> read_lines(const fs::path& p) {
  std::ifstream f(p);
  std::vector<json> out;
  for (std::string line; std::getline(f, line);) out.push_back(json::parse(line));
  return out;
}

TEST(TokenizeCli, IdsAreAutoTokenizersForRebuiltClasses) {
  testing::TempDir tmp;
  for (const char* name : {"llama2_legacy", "gemma", "bert_default_lowercase", "t5", "roberta_prefix"}) {
    SCOPED_TRACE(name);
    const json exp = read_json_file(kAuto / name / "expected.json");
    const auto texts = one_line_texts(exp);
    ASSERT_GT(texts.size(), 10u);
    std::string input;
    for (const auto& [t, _] : texts) input += t + "\n";
    const fs::path in = tmp.write("in.txt", input);
    for (bool special : {true, false}) {
      const fs::path out = tmp / "out.jsonl";
      const auto run = testing::run_kiln("tokenize --tokenizer " + (kAuto / name).string() + " --input " +
                                             in.string() + " --output " + out.string() +
                                             (special ? "" : " --no_special_tokens"),
                                         tmp.path());
      ASSERT_EQ(run.status, 0) << run.output;
      const std::vector<json> lines = read_lines(out);
      ASSERT_EQ(lines.size(), texts.size());
      for (size_t i = 0; i < texts.size(); ++i)
        EXPECT_EQ(lines[i]["ids"], texts[i].second[special ? "ids" : "ids_no_special"]) << json(texts[i].first);
    }
  }
}

TEST(TokenizeCli, BadClassFlagIsAOneLineErrorNamingFileAndKey) {
  testing::TempDir tmp;
  const fs::path dir = tmp / "tok";
  fs::create_directories(dir);
  fs::copy_file(kAuto / "llama2" / "tokenizer.json", dir / "tokenizer.json");
  std::ofstream(dir / "tokenizer_config.json") << R"({"tokenizer_class": "LlamaTokenizer", "add_prefix_space": "yes"})";
  const fs::path in = tmp.write("in.txt", "hello\n");
  const auto run = testing::run_kiln("tokenize --tokenizer " + dir.string() + " --input " + in.string() +
                                         " --output " + (tmp / "out.jsonl").string(),
                                     tmp.path());
  EXPECT_NE(run.status, 0);
  EXPECT_NE(run.output.find("tokenizer_config.json"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("'add_prefix_space'"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("terminate"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace kiln
