// from_pretrained on the legacy files (vocab.txt, vocab.json + merges.txt,
// spiece.model) must give the ids tokenizer.json gives (the goldens).
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/tokenizers/tokenizer.h"
#include "support/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR) + "/tokenizers";
const std::string kShared = std::string(KILN_SHARED_DIR) + "/tokenizers";

// A temporary model directory linking only the given shared files.
struct LegacyDir {
  fs::path path;
  LegacyDir(const std::string& model, const std::vector<std::string>& files) {
    path = fs::temp_directory_path() / ("kiln_tok_" + model + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    for (const auto& f : files) {
      fs::path src = fs::path(kShared) / model / f;
      if (fs::exists(src)) fs::create_symlink(src, path / f);
    }
  }
  ~LegacyDir() { fs::remove_all(path); }
};

void check_against_golden(const Tokenizer& tok, const std::string& model) {
  std::ifstream cin(kData + "/corpus.txt", std::ios::binary);
  std::vector<std::string> lines;
  for (std::string l; std::getline(cin, l);) lines.push_back(l);
  std::ifstream gin(kData + "/" + model + ".json");
  json g = json::parse(gin);
  for (size_t i = 0; i < lines.size(); ++i) {
    const json& exp = g["lines"][i];
    Encoding e = tok.encode(lines[i]);
    EXPECT_EQ(json(e.ids), exp["ids"]) << model << " line " << i + 1 << ": " << lines[i];
    EXPECT_EQ(tok.decode(e.ids, true), exp["decoded_skip"].get<std::string>()) << "line " << i + 1;
  }
}

#define SKIP_WITHOUT(model) SKIP_WITHOUT_SHARED(kShared + "/" + model)

TEST(Pretrained, BertVocabTxt) {
  SKIP_WITHOUT("bert-base-uncased");
  LegacyDir dir("bert-base-uncased", {"vocab.txt", "tokenizer_config.json", "config.json"});
  Tokenizer tok = Tokenizer::from_pretrained(dir.path.string());
  check_against_golden(tok, "bert-base-uncased");
}

TEST(Pretrained, Gpt2VocabJsonMerges) {
  SKIP_WITHOUT("gpt2");
  LegacyDir dir("gpt2", {"vocab.json", "merges.txt", "tokenizer_config.json", "config.json"});
  Tokenizer tok = Tokenizer::from_pretrained(dir.path.string());
  EXPECT_EQ(tok.model_max_length, 1024u);
  check_against_golden(tok, "gpt2");
}

TEST(Pretrained, T5SpieceModel) {
  SKIP_WITHOUT("t5-small");
  LegacyDir dir("t5-small", {"spiece.model", "config.json"});
  Tokenizer tok = Tokenizer::from_pretrained(dir.path.string());
  EXPECT_EQ(tok.token_to_id("<extra_id_0>"), 32099u);
  EXPECT_EQ(tok.token_to_id("<extra_id_99>"), 32000u);
  check_against_golden(tok, "t5-small");
}

TEST(Pretrained, PrefersTokenizerJson) {
  SKIP_WITHOUT("bert-base-uncased");
  Tokenizer tok = Tokenizer::from_pretrained(kShared + "/bert-base-uncased");
  EXPECT_EQ(tok.encode("Hello, world!").ids, (std::vector<uint32_t>{101, 7592, 1010, 2088, 999, 102}));
}

// RoBERTa's files (vocab.json with <s> and </s>): tokenizer_config.json's
// sep_token and cls_token must exist and be in the vocabulary, else an error
// (fuzz/corpus/tokenizer_legacy/crash-roberta-sep-*.txt).
TEST(Pretrained, RobertaSpecialTokensMustBeInTheVocabulary) {
  fs::path dir = fs::temp_directory_path() / ("kiln_tok_roberta_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "vocab.json") << R"({"<s>": 0, "</s>": 1, "a": 2})";
  std::ofstream(dir / "merges.txt") << "#version: 0.2\n";
  auto error_with = [&](const std::string& config) {
    std::ofstream(dir / "tokenizer_config.json") << config;
    return kiln::testing::error_of([&] { Tokenizer::from_pretrained(dir.string()); });
  };
  EXPECT_EQ(error_with("{}"), "");
  EXPECT_NE(error_with(R"({"sep_token": "zzz"})").find("special tokens 'zzz' and '<s>' must be in the vocabulary"),
            std::string::npos);
  EXPECT_NE(error_with(R"({"cls_token": null})").find("RoBERTa needs sep_token and cls_token"), std::string::npos);
  fs::remove_all(dir);
}

TEST(Pretrained, MissingFilesNamed) {
  fs::path empty = fs::temp_directory_path() / ("kiln_tok_empty_" + std::to_string(::getpid()));
  fs::create_directories(empty);
  try {
    Tokenizer::from_pretrained(empty.string());
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("no tokenizer files found"), std::string::npos) << e.what();
  }
  fs::remove_all(empty);
}

}  // namespace
