// Exact agreement with Hugging Face tokenizers (npm `tokenizers`, the Rust
// library) on the real tokenizer files in ../shared/tokenizers, over the
// corpus in tests/goldens/tokenizers/corpus.txt. Expected outputs were made by
// tests/goldens/tokenizers/gen_tokenizer_goldens.js.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kiln/core/error.h"
#include "kiln/tokenizers/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR) + "/tokenizers";
const std::string kShared = std::string(KILN_SHARED_DIR) + "/tokenizers";

std::vector<std::string> corpus() {
  std::ifstream in(kData + "/corpus.txt", std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

json golden(const std::string& model) {
  std::ifstream in(kData + "/" + model + ".json");
  return json::parse(in);
}

json offsets_json(const Encoding& e) {
  json o = json::array();
  for (auto [a, b] : e.offsets) o.push_back({a, b});
  return o;
}

// Compares every field the golden holds; returns "" or the first difference.
std::string diff(const Encoding& e, const json& g) {
  auto cmp = [&](const char* name, const json& got) -> std::string {
    if (!g.contains(name) || got == g[name]) return "";
    return std::string(name) + ": got " + got.dump() + "\n  expected " + g[name].dump();
  };
  for (auto r : {cmp("ids", e.ids), cmp("tokens", e.tokens), cmp("offsets", offsets_json(e)),
                 cmp("type_ids", e.type_ids), cmp("special_tokens_mask", e.special_tokens_mask),
                 cmp("attention_mask", e.attention_mask)}) {
    if (!r.empty()) return r;
  }
  return "";
}

class Conformance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!fs::exists(kShared + "/" + GetParam() + "/tokenizer.json")) {
      GTEST_SKIP() << "shared tokenizer files not found at " << kShared
                   << " (they are not part of this repository)";
    }
  }
};

TEST_P(Conformance, CorpusLines) {
  Tokenizer tok = Tokenizer::from_file(kShared + "/" + GetParam() + "/tokenizer.json");
  auto lines = corpus();
  json g = golden(GetParam());
  ASSERT_EQ(lines.size(), g["lines"].size());
  int failures = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const json& exp = g["lines"][i];
    Encoding e = tok.encode(lines[i]);
    std::string d = diff(e, exp);
    EXPECT_EQ(d, "") << "line " << i + 1 << ": " << lines[i];
    Encoding raw = tok.encode(lines[i], false);
    EXPECT_EQ(json(raw.ids), exp["ids_no_special"]) << "line " << i + 1 << " without specials";
    EXPECT_EQ(tok.decode(e.ids, false), exp["decoded"].get<std::string>()) << "line " << i + 1;
    EXPECT_EQ(tok.decode(e.ids, true), exp["decoded_skip"].get<std::string>()) << "line " << i + 1;
    if (!d.empty() && ++failures > 10) break;
  }
}

TEST_P(Conformance, Pairs) {
  Tokenizer tok = Tokenizer::from_file(kShared + "/" + GetParam() + "/tokenizer.json");
  auto lines = corpus();
  json g = golden(GetParam());
  for (const json& p : g["pairs"]) {
    Encoding e = tok.encode_pair(lines[p["a"].get<size_t>()], lines[p["b"].get<size_t>()]);
    EXPECT_EQ(diff(e, p), "") << "pair of lines " << p["a"].get<size_t>() + 1 << ", "
                              << p["b"].get<size_t>() + 1;
  }
}

TEST_P(Conformance, PairTruncation) {
  Tokenizer tok = Tokenizer::from_file(kShared + "/" + GetParam() + "/tokenizer.json");
  auto lines = corpus();
  json g = golden(GetParam());
  for (const json& setting : g["pair_truncation"]) {
    TruncationParams t;
    t.max_length = setting["maxLength"].get<size_t>();
    std::string s = setting["strategy"].get<std::string>();
    t.strategy = s == "LongestFirst" ? TruncationStrategy::LongestFirst
                 : s == "OnlyFirst"  ? TruncationStrategy::OnlyFirst
                                     : TruncationStrategy::OnlySecond;
    tok.set_truncation(t);
    for (const json& r : setting["results"]) {
      const std::string& a = lines[r["a"].get<size_t>()];
      const std::string& b = lines[r["b"].get<size_t>()];
      if (r.contains("error")) {
        EXPECT_THROW(tok.encode_pair(a, b), kiln::Error) << setting["name"];
        continue;
      }
      Encoding e = tok.encode_pair(a, b);
      std::string d = diff(e, r);
      EXPECT_EQ(d, "") << setting["name"] << " lines " << r["a"].get<size_t>() + 1;
    }
  }
}

TEST_P(Conformance, Batches) {
  Tokenizer tok = Tokenizer::from_file(kShared + "/" + GetParam() + "/tokenizer.json");
  auto lines = corpus();
  json g = golden(GetParam());
  for (const json& setting : g["batches"]) {
    if (setting["truncation"].is_null()) {
      tok.set_truncation(std::nullopt);
    } else {
      TruncationParams t;
      t.max_length = setting["truncation"]["maxLength"].get<size_t>();
      if (setting["truncation"].value("direction", "right") == "left") t.direction = Direction::Left;
      tok.set_truncation(t);
    }
    PaddingParams p;
    const json& pj = setting["padding"];
    if (pj.contains("maxLength")) p.length = pj["maxLength"].get<size_t>();
    if (pj.contains("padToMultipleOf")) p.pad_to_multiple_of = pj["padToMultipleOf"].get<size_t>();
    if (pj.value("direction", "right") == "left") p.direction = Direction::Left;
    tok.set_padding(p);
    std::vector<std::string> texts;
    for (const json& i : setting["inputs"]) texts.push_back(lines[i.get<size_t>()]);
    auto encs = tok.encode_batch(texts);
    ASSERT_EQ(encs.size(), setting["encodings"].size());
    for (size_t k = 0; k < encs.size(); ++k) {
      EXPECT_EQ(diff(encs[k], setting["encodings"][k]), "") << setting["name"] << " item " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HuggingFace, Conformance,
                         ::testing::Values("bert-base-uncased", "gpt2", "t5-small"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
