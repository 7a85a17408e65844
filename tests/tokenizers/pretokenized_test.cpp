// Pre-split input (a list of words) against Hugging Face's implementation
// (tests/goldens/tokenizers/gen_pretokenized_goldens.js).
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

json offsets_json(const Encoding& e) {
  json o = json::array();
  for (auto [a, b] : e.offsets) o.push_back({a, b});
  return o;
}

TEST(PreSplitInput, AgreesWithHuggingFace) {
  std::ifstream in(kData + "/pretokenized.json");
  json g = json::parse(in);
  ASSERT_EQ(g["tokenizers"].size(), 6u);
  size_t checked = 0;
  for (const json& spec : g["tokenizers"]) {
    const std::string name = spec["name"];
    SCOPED_TRACE(name);
    std::optional<Tokenizer> loaded;
    if (spec.contains("shared")) {
      std::string file = kShared + "/" + spec["shared"].get<std::string>();
      if (!fs::exists(file)) continue;  // the shared files are not in the repository
      loaded = Tokenizer::from_file(file);
    } else {
      loaded = Tokenizer::from_json_string(spec["tokenizer"].dump(), name);
    }
    Tokenizer& tok = *loaded;
    for (const json& c : spec["cases"]) {
      auto words = c["words"].get<std::vector<std::string>>();
      bool add = c["add_special_tokens"];
      if (c.contains("truncation")) {
        TruncationParams t;
        t.max_length = c["truncation"]["max_length"];
        t.direction = c["truncation"]["direction"] == "left" ? Direction::Left : Direction::Right;
        tok.set_truncation(t);
      } else {
        tok.set_truncation(std::nullopt);
      }
      Encoding e = c.contains("pair")
                       ? tok.encode_words_pair(words, c["pair"].get<std::vector<std::string>>(), add)
                       : tok.encode_words(words, add);
      std::string where = c["words"].dump() + (c.contains("pair") ? " + " + c["pair"].dump() : "") +
                          (add ? "" : " without special tokens") +
                          (c.contains("truncation") ? " " + c["truncation"].dump() : "");
      EXPECT_EQ(json(e.ids), c["ids"]) << where;
      EXPECT_EQ(json(e.tokens), c["tokens"]) << where;
      EXPECT_EQ(offsets_json(e), c["offsets"]) << where;
      EXPECT_EQ(json(e.type_ids), c["type_ids"]) << where;
      EXPECT_EQ(json(e.special_tokens_mask), c["special_tokens_mask"]) << where;
      EXPECT_EQ(json(e.attention_mask), c["attention_mask"]) << where;
      ++checked;
    }
  }
  EXPECT_GE(checked, 150u);
}

Tokenizer word_level() {
  return Tokenizer::from_json_string(R"({
    "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "[UNK]": 2, "[CLS]": 3, "[SEP]": 4},
              "unk_token": "[UNK]"},
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 4], "cls": ["[CLS]", 3]},
    "added_tokens": [{"id": 3, "content": "[CLS]", "special": true},
                     {"id": 4, "content": "[SEP]", "special": true}]})",
                                     "word_level");
}

// Word ids count words, not pre-tokenizer splits; offsets are within a word.
TEST(PreSplitInput, WordIdsAreWordIndices) {
  Tokenizer tok = word_level();
  Encoding e = tok.encode_words({"a b", "", "b"});
  EXPECT_EQ(e.ids, (std::vector<uint32_t>{3, 0, 1, 1, 4}));
  std::vector<std::optional<uint32_t>> words{std::nullopt, 0u, 0u, 2u, std::nullopt};
  EXPECT_EQ(e.word_ids, words);
  EXPECT_EQ(e.offsets, (std::vector<std::pair<size_t, size_t>>{{0, 0}, {0, 1}, {2, 3}, {0, 1}, {0, 0}}));
  Encoding p = tok.encode_words_pair({"a"}, {"b", "a"});
  EXPECT_EQ(p.type_ids, (std::vector<uint32_t>{0, 0, 0, 1, 1, 1}));
  std::vector<std::optional<uint32_t>> pair_words{std::nullopt, 0u, std::nullopt, 0u, 1u, std::nullopt};
  EXPECT_EQ(p.word_ids, pair_words);
  auto batch = tok.encode_batch_words({{"a"}, {"b", "b", "a"}});
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[1].ids, (std::vector<uint32_t>{3, 1, 1, 0, 4}));
}

// run_ner loads byte-level tokenizers with add_prefix_space=True: each
// pre-split word then encodes as it does after a space in running text.
TEST(PreSplitInput, AddPrefixSpaceGivesEachWordItsLeadingSpace) {
  const std::string file = kShared + "/gpt2/tokenizer.json";
  if (!fs::exists(file)) GTEST_SKIP() << file << " is not here";
  Tokenizer t = Tokenizer::from_file(file);
  const std::vector<std::string> words = {"Hello", "world", "EU", "rejects"};
  const Encoding before = t.encode_words(words, false);
  t.set_add_prefix_space();
  const Encoding after = t.encode_words(words, false);
  EXPECT_EQ(after.ids, t.encode(" Hello world EU rejects", false).ids);
  EXPECT_NE(after.ids, before.ids);
  EXPECT_EQ(after.word_ids, (std::vector<std::optional<uint32_t>>{0, 1, 2, 3}));
  t.set_add_prefix_space();  // twice: no change
  EXPECT_EQ(t.encode_words(words, false).ids, after.ids);
  // WordPiece has no byte-level part: unchanged.
  const std::string bert = kShared + "/bert-base-uncased/tokenizer.json";
  if (!fs::exists(bert)) return;
  Tokenizer b = Tokenizer::from_file(bert);
  const auto ids = b.encode_words(words, true).ids;
  b.set_add_prefix_space();
  EXPECT_EQ(b.encode_words(words, true).ids, ids);
}

TEST(PreSplitInput, InvalidUtf8NamesTheWord) {
  Tokenizer tok = word_level();
  try {
    tok.encode_words({"a", "b\xFF"});
    FAIL() << "invalid UTF-8";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("word 1"), std::string::npos) << e.what();
  }
}

}  // namespace
