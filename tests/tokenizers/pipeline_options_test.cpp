// What the pipeline goldens (pipelines_test.cpp) do not show: transformers'
// clean_up_tokenization_spaces switches read from tokenizer_config.json, and
// clear errors for the Oniguruma regex features and component values kiln
// does not take.
#include <gtest/gtest.h>

#include <string>

#include "kiln/tokenizers/tokenizer.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

using namespace kiln::tokenizers;
using kiln::testing::error_of;

namespace {

// "a" "'" "s" "," "." as a WordLevel vocabulary (no decoder: tokens joined
// with spaces), or as a BPE one when `bpe`.
std::string tokenizer_json(bool bpe) {
  const std::string vocab = R"({"a": 0, "'": 1, "s": 2, ",": 3, ".": 4, "[UNK]": 5})";
  const std::string model = bpe ? R"({"type": "BPE", "vocab": )" + vocab + R"(, "merges": []})"
                                : R"({"type": "WordLevel", "unk_token": "[UNK]", "vocab": )" + vocab + "}";
  return R"({"model": )" + model + R"(, "pre_tokenizer": {"type": "WhitespaceSplit"}})";
}

std::string decode_in(const kiln::testing::TempDir& dir, bool bpe, const std::string& config) {
  dir.write("tokenizer.json", tokenizer_json(bpe));
  dir.write("tokenizer_config.json", config);
  return Tokenizer::from_pretrained(dir.path().string()).decode({0, 1, 2, 3, 0, 4});
}

TEST(PipelineOptions, CleanUpTokenizationSpacesAsTransformers) {
  kiln::testing::TempDir dir;
  EXPECT_EQ(decode_in(dir, false, "{}"), "a ' s , a .");
  EXPECT_EQ(decode_in(dir, false, R"({"clean_up_tokenization_spaces": true})"), "a's, a.");
  // transformers 5 leaves BPE output alone unless told to clean it anyway.
  EXPECT_EQ(decode_in(dir, true, R"({"clean_up_tokenization_spaces": true})"), "a ' s , a .");
  EXPECT_EQ(decode_in(dir, true,
                      R"({"clean_up_tokenization_spaces": true,
                          "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output": true})"),
            "a's, a.");
  // tokenizer.json alone is tokenizers' decode.
  EXPECT_EQ(Tokenizer::from_json_string(tokenizer_json(false), "t.json").decode({0, 1, 2, 3, 0, 4}),
            "a ' s , a .");
  const std::string e =
      error_of([&] { decode_in(dir, false, R"({"clean_up_tokenization_spaces": "yes"})"); });
  EXPECT_CONTAINS(e, "tokenizer_config.json");
  EXPECT_CONTAINS(e, "clean_up_tokenization_spaces");
}

std::string load_error(const std::string& pre_tokenizer) {
  return error_of([&] {
    Tokenizer::from_json_string(R"({"model": {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"},
                                    "pre_tokenizer": )" + pre_tokenizer + "}",
                                "t.json");
  });
}

TEST(PipelineOptions, UnsupportedRegexFeaturesAreNamed) {
  std::string e =
      load_error(R"({"type": "Split", "pattern": {"Regex": "[a-z&&[^aeiou]]"}, "behavior": "Isolated"})");
  EXPECT_CONTAINS(e, "t.json: pre_tokenizer.pattern");
  EXPECT_CONTAINS(e, "character class intersection");
  e = load_error(R"({"type": "Split", "pattern": {"Regex": "[a[^b]]"}, "behavior": "Isolated"})");
  EXPECT_CONTAINS(e, "t.json: pre_tokenizer.pattern");
  EXPECT_CONTAINS(e, "negated character class inside another");
  e = load_error(R"({"type": "Split", "pattern": {"Regex": "[a\\H]"}, "behavior": "Isolated"})");
  EXPECT_CONTAINS(e, "t.json: pre_tokenizer.pattern");
  EXPECT_CONTAINS(e, "\\H inside a character class");
}

TEST(PipelineOptions, FixedLengthAndNmt) {
  std::string e = load_error(R"({"type": "FixedLength", "length": 0})");
  EXPECT_CONTAINS(e, "t.json: pre_tokenizer.length: expected a positive number");
  // Default length 5; Nmt turns the tab into a space, WhitespaceSplit drops it.
  Tokenizer t = Tokenizer::from_json_string(
      R"({"model": {"type": "WordLevel", "vocab": {"abcde": 0, "fg": 1, "hi": 2}, "unk_token": "hi"},
          "normalizer": {"type": "Nmt"},
          "pre_tokenizer": {"type": "Sequence",
                            "pretokenizers": [{"type": "WhitespaceSplit"}, {"type": "FixedLength"}]}})",
      "t.json");
  EXPECT_EQ(t.encode("abcdefg\thi\x07").ids, (std::vector<uint32_t>{0, 1, 2}));
}

}  // namespace
