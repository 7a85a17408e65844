// A config whose weights cannot fit is an error before anything is
// allocated, naming the file, the fields and the numbers.
#include <gtest/gtest.h>

#include "kiln/core/host_memory.h"
#include "kiln/core/json.h"
#include "kiln/models/config.h"
#include "kiln/models/model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::error_of;

std::string config_error(const std::string& text) {
  return error_of([&] { models::config_from_json(parse_json(text, "config.json"), "config.json"); });
}

TEST(ConfigSize, HugeFieldsAreRefusedBeforeAllocating) {
  ASSERT_GT(host_memory::physical_bytes(), 0u);
  std::string e = config_error(R"({"model_type": "bert", "vocab_size": 1000000000000})");
  EXPECT_CONTAINS(e, "config.json: the model would hold 7.68e+14 parameters (1.4 PiB as bf16), more than this "
                     "machine's memory");
  EXPECT_CONTAINS(e, "word embeddings (vocab_size 1000000000000 x hidden_size 768) = 7.68e+14");

  e = config_error(R"({"model_type": "gpt2", "n_layer": 1000000000})");
  EXPECT_CONTAINS(e, "1000000000 layers (n_layer), each 4 x n_embd^2 + 2 x n_embd x n_inner (768, 3072)");

  e = config_error(R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                       "num_hidden_layers": 2, "intermediate_size": 100000000000})");
  EXPECT_CONTAINS(e, "2 layers (num_hidden_layers)");
  EXPECT_CONTAINS(e, "intermediate_size (100000000000)");

  e = config_error(R"({"model_type": "t5", "num_layers": 1000000000})");
  EXPECT_CONTAINS(e, "encoder layers (num_layers)");

  // 2^63 does not fit int64: refused as such, never wrapped to a negative number.
  EXPECT_EQ(config_error(R"({"model_type": "bert", "vocab_size": 9223372036854775808})"),
            "config.json: 'vocab_size' must be an integer below 2^63, got number 9223372036854775808");
  e = config_error(R"({"model_type": "bert", "vocab_size": 9223372036854775807})");
  EXPECT_CONTAINS(e, "vocab_size 9223372036854775807 x hidden_size 768");
}

TEST(ConfigSize, ModelsBuiltFromCodeAreCheckedToo) {
  models::BertConfig c;
  c.num_hidden_layers = 1000000000;
  EXPECT_CONTAINS(error_of([&] { models::create_model("BertModel", c, 0); }),
                  "BertModel's config: the model would hold");
}

TEST(ConfigSize, TypeErrorsNameTheFileAndKey) {
  EXPECT_EQ(config_error(R"({"model_type": 7})"), "config.json: 'model_type' must be a string, got number 7");
  EXPECT_CONTAINS(config_error(R"({"model_type": "bert", "vocab_size": [1, 2]})"),
                  "config.json: 'vocab_size' must be an integer, got array [1,2]");
  EXPECT_CONTAINS(config_error(R"({"vocab_size": 3})"), "config.json: no 'model_type' (supported: bert,");
  // Unknown keys are kept; a deeply nested one is refused while reading, not when copied.
  EXPECT_CONTAINS(config_error("{\"model_type\": \"bert\", \"x\": " + std::string(50000, '[') + "}"),
                  "nests deeper than 256 levels");
}

// id2label names every label: a huge num_labels is refused, not filled in
// (fuzz/corpus/config/timeout-num-labels.json).
TEST(ConfigSize, NumLabelsIsBounded) {
  EXPECT_CONTAINS(config_error(R"({"model_type": "gpt2", "num_labels": 513555555551})"),
                  "num_labels must be in [1, 65536], got 513555555551");
  EXPECT_EQ(config_error(R"({"model_type": "gpt2", "num_labels": 65536})"), "");
}

}  // namespace
}  // namespace kiln
