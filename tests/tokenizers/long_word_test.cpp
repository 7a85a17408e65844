// A line without a space is one pre-tokenized word, so per-word work must not be quadratic in its length.
// BPE merged a word by rescanning every pair after each merge (a 50 MB word ran for hours); long words now
// take the merge queue, n log n. Unigram fused a run of unknown characters by prepending each to a string
// (5M CJK characters through T5's tokenizer did not finish); the run is now kept as bounds.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiln/tokenizers/tokenizer.h"
#include "kiln/tokenizers/unigram.h"

using namespace kiln::tokenizers;

namespace {

const std::string kTokenizer = std::string(KILN_TEST_DATA_DIR) + "/sft/tokenizer";

TEST(LongWord, BpeMergesALongWordInNLogN) {
  const Tokenizer tok = Tokenizer::from_pretrained(kTokenizer);
  std::string word;
  for (int i = 0; i < 40000; ++i) word += "hello";  // 200k characters, 200k symbols before merging
  const auto start = std::chrono::steady_clock::now();
  const Encoding e = tok.encode(word, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);  // the rescanning merge took minutes
  EXPECT_LT(e.ids.size(), word.size());  // merged, not left as bytes
  EXPECT_EQ(tok.decode(e.ids, false), word);
}

TEST(LongWord, UnigramFusesALongRunOfUnknownsInLinearTime) {
  const Unigram u({{"<unk>", 0}, {"a", -1}, {"b", -1}}, 0u, false);
  std::string run;
  for (int i = 0; i < 2'000'000; ++i) run += "x";
  const auto start = std::chrono::steady_clock::now();
  const auto pieces = u.tokenize("a" + run + "b" + run);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);  // prepending each unknown took minutes
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[0].value, "a");
  EXPECT_EQ(pieces[1].value, run);  // one unk piece carrying the raw text
  EXPECT_EQ(pieces[1].id, 0u);
  EXPECT_EQ(pieces[2].value, "b");
  EXPECT_EQ(pieces[3].value, run);
}

}  // namespace
