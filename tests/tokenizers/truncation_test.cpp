// Truncation against Hugging Face's implementation: every pair length on a
// small WordLevel vocabulary, and bert-base-uncased, gpt2 and t5-small on
// corpus pairs
// (tests/goldens/tokenizers/gen_truncation_goldens.js).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/tokenizers/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR) + "/tokenizers";
const std::string kShared = std::string(KILN_SHARED_DIR) + "/tokenizers";

json goldens() {
  std::ifstream in(kData + "/truncation.json");
  return json::parse(in);
}

std::string words(const char* prefix, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? " " : "") + std::string(prefix) + std::to_string(i);
  return s;
}

TruncationParams longest_first(size_t max_length, Direction direction) {
  TruncationParams t;
  t.max_length = max_length;
  t.strategy = TruncationStrategy::LongestFirst;
  t.direction = direction;
  return t;
}

TEST(Truncation, LongestFirstEveryPairLength) {
  json g = goldens();
  ASSERT_EQ(g["grid"].size(), 2u);
  size_t checked = 0;
  for (const json& spec : g["grid"]) {
    SCOPED_TRACE(spec["name"].get<std::string>());
    Tokenizer tok = Tokenizer::from_json_string(spec["tokenizer"].dump(), spec["name"]);
    for (const json& s : spec["settings"]) {
      size_t max_length = s["max_length"];
      bool add = s["add_special_tokens"];
      Direction d = s["direction"] == "left" ? Direction::Left : Direction::Right;
      tok.set_truncation(longest_first(max_length, d));
      std::string where = "max_length " + std::to_string(max_length) + " " +
                          s["direction"].get<std::string>() + (add ? " with" : " without") +
                          " special tokens";
      for (const json& c : s["single"]) {
        size_t n1 = c["n1"];
        EXPECT_EQ(json(tok.encode(words("a", n1), add).ids), c["ids"]) << where << ", " << n1;
        ++checked;
      }
      int failures = 0;
      for (const json& c : s["pairs"]) {
        size_t n1 = c["n1"], n2 = c["n2"];
        json got = tok.encode_pair(words("a", n1), words("b", n2), add).ids;
        EXPECT_EQ(got, c["ids"]) << where << ", lengths " << n1 << " and " << n2;
        ++checked;
        if (got != c["ids"] && ++failures > 5) break;
      }
    }
  }
  EXPECT_GT(checked, 5000u);
}

class RealTokenizers : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTokenizers, CorpusPairs) {
  const std::string& model = GetParam();
  if (!fs::exists(kShared + "/" + model + "/tokenizer.json")) {
    GTEST_SKIP() << "shared tokenizer files not found at " << kShared;
  }
  Tokenizer tok = Tokenizer::from_file(kShared + "/" + model + "/tokenizer.json");
  std::ifstream in(kData + "/corpus.txt", std::ios::binary);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  json g = goldens();
  size_t checked = 0;
  for (const json& m : g["models"]) {
    if (m["model"] != model) continue;
    for (const json& s : m["settings"]) {
      size_t max_length = s["max_length"];
      bool add = s["add_special_tokens"];
      Direction d = s["direction"] == "left" ? Direction::Left : Direction::Right;
      tok.set_truncation(longest_first(max_length, d));
      for (const json& r : s["results"]) {
        size_t a = r["a"], b = r["b"];
        EXPECT_EQ(json(tok.encode_pair(lines[a], lines[b], add).ids), r["ids"])
            << "max_length " << max_length << " " << s["direction"].get<std::string>()
            << " lines " << a + 1 << ", " << b + 1 << (add ? "" : " without special tokens");
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 640u);
}

INSTANTIATE_TEST_SUITE_P(HuggingFace, RealTokenizers,
                         ::testing::Values("bert-base-uncased", "gpt2", "t5-small"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(Truncation, BadBudgetsAreErrors) {
  json g = goldens();
  Tokenizer tok = Tokenizer::from_json_string(g["grid"][0]["tokenizer"].dump(), "word_level");
  // Fewer tokens than the 3 special tokens of a pair: tokenizers wraps around
  // in unsigned arithmetic; kiln refuses.
  tok.set_truncation(longest_first(2, Direction::Right));
  EXPECT_THROW(tok.encode_pair("a0", "b0"), kiln::Error);
  TruncationParams t = longest_first(5, Direction::Right);
  t.strategy = TruncationStrategy::OnlySecond;
  tok.set_truncation(t);
  try {
    tok.encode(words("a", 9));
    FAIL() << "OnlySecond without a second sequence";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("Second sequence not provided"), std::string::npos);
  }
}

}  // namespace
