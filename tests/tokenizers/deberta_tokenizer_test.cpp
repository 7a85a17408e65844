// A DeBERTa-v3-style tokenizer.json (SentencePiece Unigram with the
// precompiled nmt_nfkc charsmap, Metaspace, [CLS] A [SEP] B [SEP]) made by
// transformers' DebertaV2Tokenizer (tests/goldens/gen_deberta_goldens.py):
// kiln gives transformers' ids for every corpus line and pair.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "kiln/tokenizers/tokenizer.h"

namespace kiln::tokenizers {
namespace {

const std::string kDir = std::string(KILN_TEST_DATA_DIR) + "/deberta";

TEST(DebertaV3Tokenizer, IdsMatchTransformers) {
  std::ifstream in(kDir + "/tokenizer_ids.json");
  const nlohmann::json g = nlohmann::json::parse(in);
  Tokenizer tok = Tokenizer::from_pretrained(kDir + "/tokenizer");
  const auto lines = g.at("lines").get<std::vector<std::string>>();
  ASSERT_GT(lines.size(), 100u);
  int mismatches = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto want = g.at("ids")[i].get<std::vector<int64_t>>();
    const Encoding e = tok.encode(lines[i]);
    std::vector<int64_t> got(e.ids.begin(), e.ids.end());
    if (got != want && ++mismatches <= 3) ADD_FAILURE() << "line " << i << ": " << lines[i];
    if (i + 1 < lines.size()) {
      const auto want_pair = g.at("pair_ids")[i].get<std::vector<int64_t>>();
      const Encoding p = tok.encode_pair(lines[i], lines[i + 1]);
      if (std::vector<int64_t>(p.ids.begin(), p.ids.end()) != want_pair && ++mismatches <= 3)
        ADD_FAILURE() << "pair " << i;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace kiln::tokenizers
