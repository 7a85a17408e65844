// A line without a space is one pre-tokenized word: BPE merged it by rescanning every pair after each merge,
// quadratic in its length (a 50 MB word ran for hours). Long words take the merge queue instead, n log n.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "kiln/tokenizers/tokenizer.h"

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

}  // namespace
