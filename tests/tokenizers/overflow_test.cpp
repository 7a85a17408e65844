// Overflowing tokens and stride against Hugging Face's implementation
// (tests/goldens/tokenizers/gen_overflow_goldens.js): every field of every
// overflowing piece, recursively, for each post-processor family, single
// texts and pairs, both truncation directions, padding and batches.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/tokenizers/tokenizer.h"
#include "support/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

const std::string kData = std::string(KILN_TEST_DATA_DIR) + "/tokenizers";
const std::string kShared = std::string(KILN_SHARED_DIR) + "/tokenizers";

json goldens() {
  std::ifstream in(kData + "/overflow.json");
  return json::parse(in);
}

json optional_json(const std::vector<std::optional<uint32_t>>& v) {
  json out = json::array();
  for (const auto& x : v) out.push_back(x ? json(*x) : json(nullptr));
  return out;
}

// "" when e matches g (overflowing pieces included), else where it differs.
std::string diff(const Encoding& e, const json& g, const std::string& at = "encoding") {
  json offsets = json::array();
  for (auto [a, b] : e.offsets) offsets.push_back({a, b});
  for (auto [name, got] : {std::pair<const char*, json>{"ids", e.ids},
                           {"type_ids", e.type_ids},
                           {"tokens", e.tokens},
                           {"offsets", offsets},
                           {"special_tokens_mask", e.special_tokens_mask},
                           {"attention_mask", e.attention_mask},
                           {"word_ids", optional_json(e.word_ids)}}) {
    if (got != g[name]) {
      return at + "." + name + ": got " + got.dump() + "\n  expected " + g[name].dump();
    }
  }
  const json& pieces = g["overflowing"];
  if (e.overflowing.size() != pieces.size()) {
    return at + ": " + std::to_string(e.overflowing.size()) + " overflowing pieces, expected " +
           std::to_string(pieces.size());
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string d = diff(e.overflowing[i], pieces[i], at + ".overflowing[" + std::to_string(i) + "]");
    if (!d.empty()) return d;
  }
  return "";
}

size_t count_pieces(const json& g) {
  size_t n = g["overflowing"].size();
  for (const json& p : g["overflowing"]) n += count_pieces(p);
  return n;
}

void configure(Tokenizer& tok, const json& c) {
  const json& t = c["truncation"];
  TruncationParams p;
  p.max_length = t["max_length"];
  p.stride = t["stride"];
  std::string s = t["strategy"];
  p.strategy = s == "LongestFirst" ? TruncationStrategy::LongestFirst
               : s == "OnlyFirst"  ? TruncationStrategy::OnlyFirst
                                   : TruncationStrategy::OnlySecond;
  p.direction = t["direction"] == "left" ? Direction::Left : Direction::Right;
  tok.set_truncation(p);
  if (c["padding"].is_null()) {
    tok.set_padding(std::nullopt);
    return;
  }
  const json& o = c["padding"];  // the Node binding's PaddingOptions
  PaddingParams pad;
  if (o.contains("maxLength")) pad.length = o["maxLength"].get<size_t>();
  if (o.contains("padToMultipleOf")) pad.pad_to_multiple_of = o["padToMultipleOf"].get<size_t>();
  if (o.contains("padId")) pad.pad_id = o["padId"];
  if (o.contains("padToken")) pad.pad_token = o["padToken"];
  if (o.value("direction", "right") == "left") pad.direction = Direction::Left;
  tok.set_padding(pad);
}

TEST(Overflow, AgreesWithHuggingFace) {
  json g = goldens();
  ASSERT_EQ(g["tokenizers"].size(), 7u);
  size_t cases = 0, pieces = 0, errors = 0, missing = 0;
  for (const json& spec : g["tokenizers"]) {
    const std::string name = spec["name"];
    SCOPED_TRACE(name);
    std::optional<Tokenizer> loaded;
    if (spec.contains("shared")) {
      std::string file = kShared + "/" + spec["shared"].get<std::string>();
      if (!fs::exists(file)) {  // the shared files are not in the repository
        ++missing;
        continue;
      }
      loaded = Tokenizer::from_file(file);
    } else {
      loaded = Tokenizer::from_json_string(spec["tokenizer"].dump(), name);
    }
    Tokenizer& tok = *loaded;
    for (const json& c : spec["cases"]) {
      configure(tok, c);
      bool add = c["add_special_tokens"];
      std::string where = c["truncation"].dump() + " padding " + c["padding"].dump() +
                          (add ? "" : " without special tokens");
      ++cases;
      if (c.contains("batch")) {
        auto texts = c["batch"].get<std::vector<std::string>>();
        std::vector<Encoding> enc = tok.encode_batch(texts, add);
        ASSERT_EQ(enc.size(), c["encodings"].size()) << where;
        for (size_t i = 0; i < enc.size(); ++i) {
          EXPECT_EQ(diff(enc[i], c["encodings"][i]), "") << where << " batch item " << i;
          pieces += count_pieces(c["encodings"][i]);
        }
        continue;
      }
      std::string text = c["text"];
      auto encode = [&] {
        return c["pair"].is_null() ? tok.encode(text, add)
                                   : tok.encode_pair(text, c["pair"].get<std::string>(), add);
      };
      where += " text '" + text + "'" + (c["pair"].is_null() ? "" : " pair '" + c["pair"].get<std::string>() + "'");
      if (c.contains("error")) {
        EXPECT_THROW(encode(), kiln::Error) << where << " (HF: " << c["error"] << ")";
        ++errors;
        continue;
      }
      EXPECT_EQ(diff(encode(), c["encoding"]), "") << where;
      pieces += count_pieces(c["encoding"]);
    }
  }
  // (The counts are those of all seven; the cases that ran have been checked.)
  if (missing > 0) GTEST_SKIP() << missing << " tokenizer files not found under " << kShared << ": their cases did not run";
  EXPECT_GE(cases, 170u);
  EXPECT_GE(pieces, 700u);
  EXPECT_GE(errors, 20u);
}

Tokenizer word_level_bert() {
  json g = goldens();
  for (const json& spec : g["tokenizers"]) {
    if (spec["name"] == "word_level_bert") {
      return Tokenizer::from_json_string(spec["tokenizer"].dump(), "word_level_bert");
    }
  }
  throw kiln::Error("overflow.json: no word_level_bert tokenizer");
}

std::string words(size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? " a" : "a") + std::to_string(i);
  return s;
}

// Where the Rust library panics (a window no longer than the stride), kiln
// refuses with an error that names the stride.
TEST(Overflow, StrideNotBelowTheCutLengthIsAnError) {
  Tokenizer tok = word_level_bert();
  TruncationParams p;
  p.max_length = 6;  // 4 tokens after [CLS] [SEP]
  p.stride = 4;
  tok.set_truncation(p);
  EXPECT_EQ(tok.encode(words(4)).ids.size(), 6u);  // nothing to cut: fine
  try {
    tok.encode(words(9));
    FAIL() << "stride 4 with windows of 4 tokens";
  } catch (const kiln::Error& e) {
    EXPECT_NE(std::string(e.what()).find("stride 4"), std::string::npos) << e.what();
  }
  // Above max_length less the special tokens of a single text, tokenizers
  // refuses the setting, whatever is encoded.
  p.max_length = 6;
  p.stride = 5;
  tok.set_truncation(p);
  EXPECT_THROW(tok.encode(words(2), false), kiln::Error);
  // A pair under LongestFirst: 9 tokens for two texts, windows of 4 and 5.
  p.max_length = 12;
  p.stride = 4;
  tok.set_truncation(p);
  EXPECT_THROW(tok.encode_pair(words(9), words(9)), kiln::Error);
  p.stride = 3;
  tok.set_truncation(p);
  Encoding e = tok.encode_pair(words(9), words(9));
  EXPECT_EQ(e.ids.size(), 12u);
  EXPECT_FALSE(e.overflowing.empty());
}

// The stride repeats the end of each window at the start of the next. Only
// what tokenizing kept overflows: it stops once max_length tokens are reached.
TEST(Overflow, WindowsOverlapByTheStride) {
  Tokenizer tok = word_level_bert();
  TruncationParams p;
  p.max_length = 8;  // 6 tokens besides [CLS] and [SEP]; tokenizing stops at 8
  p.stride = 2;
  tok.set_truncation(p);
  Encoding e = tok.encode(words(20));  // a0..a19 are ids 10..29
  EXPECT_EQ(e.ids, (std::vector<uint32_t>{1, 10, 11, 12, 13, 14, 15, 2}));
  ASSERT_EQ(e.overflowing.size(), 1u);
  EXPECT_EQ(e.overflowing[0].ids, (std::vector<uint32_t>{1, 14, 15, 16, 17, 2}));
  EXPECT_EQ(e.overflowing[0].special_tokens_mask, (std::vector<uint32_t>{1, 0, 0, 0, 0, 1}));
  p.direction = Direction::Left;
  p.max_length = 5;  // 3 tokens, tokenizing stops at 5 (a15..a19)
  p.stride = 1;
  tok.set_truncation(p);
  e = tok.encode(words(20));
  EXPECT_EQ(e.ids, (std::vector<uint32_t>{1, 27, 28, 29, 2}));
  ASSERT_EQ(e.overflowing.size(), 1u);
  EXPECT_EQ(e.overflowing[0].ids, (std::vector<uint32_t>{1, 25, 26, 27, 2}));
  tok.set_truncation(std::nullopt);
  EXPECT_TRUE(tok.encode(words(20)).overflowing.empty());
}

// Without tokenizers 0.23's early exit (as 0.22 and earlier): every window of the whole text overflows.
TEST(Overflow, WithoutTheEarlyExitEveryWindowOverflows) {
  Tokenizer tok = word_level_bert();
  TruncationParams p;
  p.max_length = 8;
  p.stride = 2;
  p.early_exit = false;
  tok.set_truncation(p);
  Encoding e = tok.encode(words(20));  // windows of 6 of a0..a19 (ids 10..29), 4 apart
  EXPECT_EQ(e.ids, (std::vector<uint32_t>{1, 10, 11, 12, 13, 14, 15, 2}));
  ASSERT_EQ(e.overflowing.size(), 4u);
  EXPECT_EQ(e.overflowing[0].ids, (std::vector<uint32_t>{1, 14, 15, 16, 17, 18, 19, 2}));
  EXPECT_EQ(e.overflowing[1].ids, (std::vector<uint32_t>{1, 18, 19, 20, 21, 22, 23, 2}));
  EXPECT_EQ(e.overflowing[2].ids, (std::vector<uint32_t>{1, 22, 23, 24, 25, 26, 27, 2}));
  EXPECT_EQ(e.overflowing[3].ids, (std::vector<uint32_t>{1, 26, 27, 28, 29, 2}));
  // A pair cut OnlySecond (run_qa's): the first text in every window.
  p.max_length = 9;  // [CLS] a0 [SEP] + 5 of the second + [SEP]
  p.strategy = TruncationStrategy::OnlySecond;
  tok.set_truncation(p);
  e = tok.encode_pair(words(1), words(12));
  ASSERT_EQ(e.overflowing.size(), 3u);  // a0..a4, a3..a7, a6..a10, a9..a11
  EXPECT_EQ(e.overflowing[2].ids, (std::vector<uint32_t>{1, 10, 2, 19, 20, 21, 2}));
}

// Each window of a pair knows which text each token came from (run_qa finds the context by sequence id 1), with
// either kind of post-processor: BertProcessing, and bert-base-uncased's TemplateProcessing.
// [CLS] q [SEP] (sequence 0 for q) and context tokens (1) then [SEP], in the encoding and each piece.
void expect_pair_windows(const Encoding& e) {
  using Ids = std::vector<std::optional<uint32_t>>;
  const auto none = std::optional<uint32_t>{};
  std::vector<const Encoding*> windows = {&e};
  for (const auto& piece : e.overflowing) windows.push_back(&piece);
  for (const Encoding* w : windows) {
    Ids expected = {none, 0u, none};
    expected.resize(w->size() - 1, 1u);
    expected.push_back(none);
    EXPECT_EQ(w->sequence_ids, expected);
  }
}

TEST(Overflow, PiecesKeepTheSequenceIdsOfTheirTexts) {
  TruncationParams p;
  p.max_length = 7;
  p.stride = 1;
  p.strategy = TruncationStrategy::OnlySecond;
  p.early_exit = false;
  Tokenizer bert = word_level_bert();
  bert.set_truncation(p);
  Encoding e = bert.encode_pair(words(1), words(6));  // [CLS] a0 [SEP] + 3 of a0..a5 + [SEP]
  ASSERT_EQ(e.overflowing.size(), 2u);  // a0..a2, a2..a4, a4..a5
  expect_pair_windows(e);
  SKIP_WITHOUT_SHARED(kShared + "/bert-base-uncased");
  Tokenizer uncased = Tokenizer::from_pretrained(kShared + "/bert-base-uncased");
  uncased.set_truncation(p);
  e = uncased.encode_pair("cat", "one two three four five six");
  ASSERT_EQ(e.overflowing.size(), 2u);
  expect_pair_windows(e);
}

}  // namespace
