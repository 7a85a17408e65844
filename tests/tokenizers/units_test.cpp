// Component tests on small vocabularies built here.
#include <gtest/gtest.h>

#include "kiln/core/error.h"
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kiln/tokenizers/bpe.h"
#include "kiln/tokenizers/decoders.h"
#include "kiln/tokenizers/normalized_string.h"
#include "kiln/tokenizers/normalizers.h"
#include "kiln/tokenizers/pre_tokenizers.h"
#include "kiln/tokenizers/tokenizer.h"
#include "kiln/tokenizers/unigram.h"
#include "kiln/tokenizers/utf8.h"
#include "kiln/tokenizers/wordlevel.h"
#include "kiln/tokenizers/wordpiece.h"

using namespace kiln::tokenizers;

namespace {

Vocab vocab_of(const std::vector<std::string>& tokens) {
  Vocab v;
  for (uint32_t i = 0; i < tokens.size(); ++i) v.set(tokens[i], i);
  return v;
}

std::vector<std::string> values_of(const std::vector<std::string>& ts) { return ts; }

std::vector<std::string> values(const std::vector<Token>& ts) {
  std::vector<std::string> out;
  for (const auto& t : ts) out.push_back(t.value);
  return out;
}

TEST(NormalizedString, NfdLowercaseKeepAlignments) {
  NormalizedString n("ÉA", 10);  // É is 2 bytes
  n.normalize(unicode::Form::NFD);
  EXPECT_EQ(n.get(), "E\xCC\x81" "A");
  n.lowercase();
  EXPECT_EQ(n.get(), "e\xCC\x81" "a");
  // Every byte of the decomposition points at the original É.
  EXPECT_EQ(n.original_range(0, 1), (std::pair<size_t, size_t>{10, 12}));
  EXPECT_EQ(n.original_range(1, 3), (std::pair<size_t, size_t>{10, 12}));
  EXPECT_EQ(n.original_range(3, 4), (std::pair<size_t, size_t>{12, 13}));
  n.normalize(unicode::Form::NFC);
  EXPECT_EQ(n.get(), "\xC3\xA9" "a");
  EXPECT_EQ(n.original_range(0, 2), (std::pair<size_t, size_t>{10, 12}));
}

TEST(NormalizedString, PrependAndReplaceAlignToNeighbours) {
  NormalizedString n("a b", 0);
  n.replace(Pattern::of_char(U' '), "\xE2\x96\x81");
  n.prepend("\xE2\x96\x81");
  EXPECT_EQ(n.get(), "\xE2\x96\x81" "a" "\xE2\x96\x81" "b");
  EXPECT_EQ(n.original_range(0, 4), (std::pair<size_t, size_t>{0, 1}));  // prefix + 'a'
  EXPECT_EQ(n.original_range(4, 7), (std::pair<size_t, size_t>{1, 2}));  // the space
}

TEST(NormalizedString, SplitBehaviors) {
  NormalizedString n("a,,b", 0);
  auto texts = [](const std::vector<NormalizedString>& v) {
    std::vector<std::string> out;
    for (const auto& s : v) out.push_back(s.get());
    return out;
  };
  Pattern comma = Pattern::of_char(U',');
  using V = std::vector<std::string>;
  EXPECT_EQ(texts(n.split(comma, SplitBehavior::Removed)), (V{"a", "b"}));
  EXPECT_EQ(texts(n.split(comma, SplitBehavior::Isolated)), (V{"a", ",", ",", "b"}));
  EXPECT_EQ(texts(n.split(comma, SplitBehavior::Contiguous)), (V{"a", ",,", "b"}));
  EXPECT_EQ(texts(n.split(comma, SplitBehavior::MergedWithPrevious)), (V{"a,", ",", "b"}));
  EXPECT_EQ(texts(n.split(comma, SplitBehavior::MergedWithNext)), (V{"a", ",", ",b"}));
}

TEST(BertNormalizer, CleansControlsChineseAndAccents) {
  BertNormalizer bert(true, true, std::nullopt, true);
  NormalizedString n("H\x01\xC3\xA9llo\t\xE4\xBD\xA0!", 0);
  bert.normalize(n);
  EXPECT_EQ(n.get(), "hello  \xE4\xBD\xA0 !");
}

TEST(WordPiece, GreedyLongestMatchAndUnk) {
  WordPiece wp(vocab_of({"[UNK]", "un", "##aff", "##able", "aff", "##a"}), "[UNK]", "##", 10);
  EXPECT_EQ(values(wp.tokenize("unaffable")), (std::vector<std::string>{"un", "##aff", "##able"}));
  auto t = wp.tokenize("unaffable");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[1].offsets, (std::pair<size_t, size_t>{2, 5}));
  EXPECT_EQ(values(wp.tokenize("unx")), (std::vector<std::string>{"[UNK]"}));
  EXPECT_EQ(values(wp.tokenize("unaffableaaa")), (std::vector<std::string>{"[UNK]"}));  // > 10 chars
}

TEST(Bpe, MergesByRankLeftmostFirst) {
  Vocab v = vocab_of({"a", "b", "c", "ab", "bc", "abc", "<unk>"});
  BpeOptions o;
  o.unk_token = "<unk>";
  Bpe bpe(v, {{"b", "c"}, {"a", "b"}, {"a", "bc"}}, o);
  EXPECT_EQ(values(bpe.tokenize("abc")), (std::vector<std::string>{"abc"}));  // b+c first
  EXPECT_EQ(values(bpe.tokenize("abab")), (std::vector<std::string>{"ab", "ab"}));
  EXPECT_EQ(values(bpe.tokenize("axxb")), (std::vector<std::string>{"a", "<unk>", "<unk>", "b"}));
  o.fuse_unk = true;
  Bpe fused(v, {{"a", "b"}}, o);
  EXPECT_EQ(values(fused.tokenize("axxb")), (std::vector<std::string>{"a", "<unk>", "b"}));
  EXPECT_EQ(fused.tokenize("axxb")[1].offsets, (std::pair<size_t, size_t>{1, 3}));
}

TEST(Bpe, ByteFallback) {
  std::vector<std::string> toks{"<unk>", "a"};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
  }
  BpeOptions o;
  o.unk_token = "<unk>";
  o.byte_fallback = true;
  Bpe bpe(vocab_of(toks), {}, o);
  EXPECT_EQ(values(bpe.tokenize("a\xC3\xA9")), (std::vector<std::string>{"a", "<0xC3>", "<0xA9>"}));
}

TEST(Bpe, MissingMergeTokenIsAnError) {
  EXPECT_THROW(Bpe(vocab_of({"a", "b"}), {{"a", "b"}}, BpeOptions{}), kiln::Error);
}

TEST(Unigram, ViterbiPicksBestSegmentation) {
  Unigram u({{"<unk>", 0}, {"a", -1}, {"b", -1}, {"ab", -1.5}, {"abc", -5}, {"c", -1}}, 0u, false);
  // ab+c = -2.5 beats abc = -5 and a+b+c = -3.
  EXPECT_EQ(values(u.tokenize("abc")), (std::vector<std::string>{"ab", "c"}));
  // Unknown characters fuse into one unk piece carrying the raw text.
  auto t = u.tokenize("axyb");
  EXPECT_EQ(values(t), (std::vector<std::string>{"a", "xy", "b"}));
  EXPECT_EQ(t[1].id, 0u);
}

Tokenizer word_level() {
  return Tokenizer::from_json_string(R"({
    "model": {"type": "WordLevel", "vocab": {"a": 0, "b": 1, "[UNK]": 2, "[CLS]": 3, "[SEP]": 4,
                                              "[PAD]": 5}, "unk_token": "[UNK]"},
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 4], "cls": ["[CLS]", 3]},
    "added_tokens": [{"id": 3, "content": "[CLS]", "special": true}, {"id": 4, "content": "[SEP]", "special": true},
                     {"id": 5, "content": "[PAD]", "special": true}]})",
                                     "word_level");
}

std::string repeat(const char* w, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += std::string(i ? " " : "") + w;
  return s;
}

// tokenizers 0.23 on WordLevel (tests/goldens/tokenizers/probe_truncation.js):
// (len a, len b) with max_length -> (kept a, kept b).
TEST(Truncation, LongestFirstMatchesHuggingFaceProbe) {
  Tokenizer tok = word_level();
  struct Case {
    size_t max, n1, n2, k1, k2;
  };
  for (Case c : std::vector<Case>{{13, 28, 21, 6, 7}, {13, 3, 20, 3, 10}, {13, 20, 3, 10, 3},
                                  {13, 9, 4, 9, 4}, {12, 9, 4, 8, 4}, {12, 4, 9, 4, 8},
                                  {7, 9, 4, 4, 3}, {7, 4, 9, 3, 4}, {7, 20, 3, 4, 3},
                                  {7, 28, 21, 3, 4}, {13, 8, 8, 6, 7}, {13, 7, 7, 6, 7}}) {
    TruncationParams t;
    t.max_length = c.max + 3;  // + [CLS] [SEP] [SEP]
    tok.set_truncation(t);
    Encoding e = tok.encode_pair(repeat("a", c.n1), repeat("b", c.n2));
    size_t k1 = std::count(e.ids.begin(), e.ids.end(), 0u);
    size_t k2 = std::count(e.ids.begin(), e.ids.end(), 1u);
    EXPECT_EQ(std::make_pair(k1, k2), std::make_pair(c.k1, c.k2))
        << "max " << c.max << " lengths " << c.n1 << "," << c.n2;
  }
}

TEST(Truncation, OnlySecondTooShortIsAnError) {
  Tokenizer tok = word_level();
  TruncationParams t;
  t.max_length = 6;
  t.strategy = TruncationStrategy::OnlySecond;
  tok.set_truncation(t);
  EXPECT_EQ(tok.encode_pair("a a", "b b b").ids, (std::vector<uint32_t>{3, 0, 0, 4, 1, 4}));
  EXPECT_THROW(tok.encode_pair("a a a a", "b"), kiln::Error);
}

TEST(Padding, BatchLongestMultipleOfAndLeft) {
  Tokenizer tok = word_level();
  PaddingParams p;
  p.pad_id = 5;
  p.pad_token = "[PAD]";
  p.pad_to_multiple_of = 4;
  tok.set_padding(p);
  auto enc = tok.encode_batch({"a", "a b a"});
  ASSERT_EQ(enc.size(), 2u);
  EXPECT_EQ(enc[0].ids, (std::vector<uint32_t>{3, 0, 4, 5, 5, 5, 5, 5}));
  EXPECT_EQ(enc[0].attention_mask, (std::vector<uint32_t>{1, 1, 1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(enc[0].special_tokens_mask, (std::vector<uint32_t>{1, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(enc[1].ids, (std::vector<uint32_t>{3, 0, 1, 0, 4, 5, 5, 5}));
  p.direction = Direction::Left;
  p.length = 6;
  p.pad_to_multiple_of.reset();
  tok.set_padding(p);
  EXPECT_EQ(tok.encode("b").ids, (std::vector<uint32_t>{5, 5, 5, 3, 1, 4}));
  EXPECT_EQ(tok.decode(tok.encode("b").ids, true), "b");
  EXPECT_EQ(tok.decode(tok.encode("b").ids, false), "[PAD] [PAD] [PAD] [CLS] b [SEP]");
}

TEST(Batch, SameAsOneByOne) {
  Tokenizer tok = word_level();
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(repeat(i % 3 ? "a" : "b", i % 17));
  auto enc = tok.encode_batch(texts);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(enc[i].ids, tok.encode(texts[i]).ids);
}

std::string gpt2_vocab_json_or_empty() {
  std::ifstream in(std::string(KILN_SHARED_DIR) + "/tokenizers/gpt2/tokenizer.json");
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A byte-level BPE (tokenizer.json text) with the given model.dropout.
std::string with_dropout(const std::string& tokenizer_json, const char* dropout) {
  nlohmann::json j = nlohmann::json::parse(tokenizer_json);
  j["model"]["dropout"] = nlohmann::json::parse(dropout);
  j["post_processor"] = nullptr;
  return j.dump();
}

std::string small_byte_level_bpe() {
  nlohmann::json all;
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/tokenizers/components.json");
  in >> all;
  for (const auto& spec : all) {
    if (spec["name"] == "roberta_byte_level") return spec["tokenizer"].dump();
  }
  throw kiln::Error("components.json: no roberta_byte_level");
}

std::vector<std::string> words_of(const Tokenizer& tok, const std::string& text) {
  return values_of(tok.encode(text, false).tokens);
}

TEST(BpeDropout, ZeroAndTinyRatesAreExactlyPlainBpe) {
  std::string gpt2 = gpt2_vocab_json_or_empty();
  std::string base = gpt2.empty() ? small_byte_level_bpe() : gpt2;
  Tokenizer plain = Tokenizer::from_json_string(with_dropout(base, "null"), "plain");
  // 0 takes the plain path; a tiny rate runs the dropout queue without ever
  // skipping, which must merge exactly as the plain algorithm does.
  Tokenizer zero = Tokenizer::from_json_string(with_dropout(base, "0.0"), "zero");
  Tokenizer tiny = Tokenizer::from_json_string(with_dropout(base, "1e-30"), "tiny");
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/tokenizers/corpus.txt");
  size_t lines = 0;
  for (std::string line; std::getline(in, line); ++lines) {
    auto expected = words_of(plain, line);
    EXPECT_EQ(words_of(zero, line), expected) << line;
    EXPECT_EQ(words_of(tiny, line), expected) << line;
  }
  EXPECT_GT(lines, 50u);
}

TEST(BpeDropout, OneLeavesCharactersAndHalfSkipsSomeMerges) {
  std::string base = small_byte_level_bpe();
  Tokenizer plain = Tokenizer::from_json_string(with_dropout(base, "null"), "plain");
  Tokenizer one = Tokenizer::from_json_string(with_dropout(base, "1.0"), "one");
  EXPECT_EQ(words_of(plain, "hello world"), (std::vector<std::string>{"\xC4\xA0hello", "\xC4\xA0world"}));
  EXPECT_EQ(words_of(one, "hello world"),
            (std::vector<std::string>{"\xC4\xA0", "h", "e", "l", "l", "o", "\xC4\xA0", "w", "o", "r", "l", "d"}));
  Tokenizer half = Tokenizer::from_json_string(with_dropout(base, "0.5"), "half");
  std::set<std::vector<std::string>> seen;
  for (int i = 0; i < 400; ++i) {
    auto t = words_of(half, "hello");
    std::string joined;
    for (const auto& s : t) joined += s;
    EXPECT_EQ(joined, "\xC4\xA0hello");  // always a segmentation of the word
    for (const auto& s : t) EXPECT_TRUE(half.token_to_id(s).has_value()) << s;
    seen.insert(t);
  }
  EXPECT_TRUE(seen.count(words_of(plain, "hello")));   // sometimes every merge
  EXPECT_TRUE(seen.count(words_of(one, "hello")));     // sometimes none
  EXPECT_GT(seen.size(), 5u);                          // and many in between
}

TEST(BpeDropout, DeterministicPerSeed) {
  Tokenizer half = Tokenizer::from_json_string(with_dropout(small_byte_level_bpe(), "0.5"), "half");
  const auto& bpe = dynamic_cast<const Bpe&>(half.model());
  auto run = [&](uint64_t seed) {
    bpe.seed_dropout(seed);
    std::vector<std::vector<std::string>> out;
    for (int i = 0; i < 50; ++i) out.push_back(words_of(half, "hello world hello"));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(BpeDropout, RateOutsideZeroOneIsAnError) {
  for (const char* bad : {"1.5", "-0.1", "\"half\""}) {
    try {
      Tokenizer::from_json_string(with_dropout(small_byte_level_bpe(), bad), "dropout.json");
      FAIL() << "dropout " << bad;
    } catch (const kiln::Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find("dropout.json: model.dropout"), std::string::npos) << what;
    }
  }
}

TEST(ByteLevelNormalizer, BytesBecomeCharactersAlignedToTheirCharacter) {
  NormalizedString n("a \xE6\x88\x91", 0);  // a, space, 我 (3 bytes)
  ByteLevelNormalizer().normalize(n);
  EXPECT_EQ(n.get(), "a\xC4\xA0\xC3\xA6\xC4\xAA\xC4\xB3");  // a Ġ æ Ī ĳ
  EXPECT_EQ(n.original_range(1, 3), (std::pair<size_t, size_t>{1, 2}));  // Ġ: the space
  EXPECT_EQ(n.original_range(3, 5), (std::pair<size_t, size_t>{2, 5}));  // æ: all of 我
  EXPECT_EQ(n.original_range(7, 9), (std::pair<size_t, size_t>{2, 5}));
}

std::vector<std::string> script_pieces(const std::string& text) {
  PreTokenizedString p(text);
  UnicodeScriptsPreTokenizer().pre_tokenize(p);
  std::vector<std::string> out;
  for (const auto& s : p.splits()) out.push_back(s.normalized.get());
  return out;
}

TEST(UnicodeScripts, SplitsWhereTheScriptChanges) {
  using V = std::vector<std::string>;
  // Hiragana, Katakana and Han are one script; 。 is Common.
  EXPECT_EQ(script_pieces("\xE3\x81\xA9\xE3\x81\x93\xE3\x81\xA7\xE7\x94\x9F\xE3\x82\x8C\xE3\x80\x82Yes"),
            (V{"\xE3\x81\xA9\xE3\x81\x93\xE3\x81\xA7\xE7\x94\x9F\xE3\x82\x8C", "\xE3\x80\x82", "Yes"}));
  // Spaces have no script: they stay with the text before them...
  EXPECT_EQ(script_pieces("Apples are \xE3\x82\x8A\xE3\x82\x93\xE3\x81\x94 \xE6\x9E\x97"),
            (V{"Apples are ", "\xE3\x82\x8A\xE3\x82\x93\xE3\x81\x94 \xE6\x9E\x97"}));
  // ... and are dropped when nothing comes before them.
  EXPECT_EQ(script_pieces("  ab 12"), (V{"ab ", "12"}));
  EXPECT_EQ(script_pieces("   "), V{});
}

TEST(CtcDecoder, CollapsesRepeatsDropsPadsAndSpacesWords) {
  CtcDecoder ctc("<pad>", "|", true);
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string t; in >> t;) out.push_back(t);
    return out;
  };
  EXPECT_EQ(ctc.decode(split("<pad> <pad> h e e l l <pad> l o o o <pad> | | w o r <pad> l d d")),
            "hello world");
  EXPECT_EQ(CtcDecoder("<pad>", "|", false).decode(split("a a | b")), "a|b");
  EXPECT_EQ(ctc.decode({}), "");
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8::lossy("a\xE2\x82" "b\xFF"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_FALSE(utf8::find_invalid("\xF0\x9F\x98\x80").has_value());
  EXPECT_EQ(utf8::find_invalid("ab\xED\xA0\x80"), 2u);  // surrogate
}

}  // namespace
