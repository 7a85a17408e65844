// The pipelines real models ship (Llama 3, Qwen, DeepSeek-V3, RoBERTa,
// Whisper, Llama 2, Mistral, Phi-3, Gemma, XLM-R, DeBERTa-v3, T5, ALBERT,
// BERT variants, single components) against Hugging Face: ids, character
// offsets, special-token masks, pairs and transformers' decode
// (tests/goldens/tokenizers/gen_pipeline_goldens.py). Each pipeline is
// written out as a model directory (tokenizer.json + tokenizer_config.json)
// and loaded with from_pretrained, as kiln's commands load them.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kiln/tokenizers/tokenizer.h"
#include "support/temp_dir.h"

using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

json load(const std::string& path) {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/" + path);
  EXPECT_TRUE(in) << path;
  return json::parse(in);
}

// The charsmap the unigram goldens name "@deberta".
const std::string& deberta_charsmap() {
  static const std::string charsmap = [] {
    const json deberta = load("deberta/tokenizer/tokenizer.json");
    for (const json& n : deberta["normalizer"]["normalizers"])
      if (n["type"] == "Precompiled") return n["precompiled_charsmap"].get<std::string>();
    ADD_FAILURE() << "no Precompiled normalizer in the DeBERTa tokenizer";
    return std::string();
  }();
  return charsmap;
}

void put_charsmap(json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "precompiled_charsmap" && it.value() == "@deberta") {
        it.value() = deberta_charsmap();
      } else {
        put_charsmap(it.value());
      }
    }
  } else if (j.is_array()) {
    for (json& x : j) put_charsmap(x);
  }
}

std::vector<size_t> flat_offsets(const Encoding& e) {
  std::vector<size_t> out;
  for (auto [a, b] : e.offsets) {
    out.push_back(a);
    out.push_back(b);
  }
  return out;
}

// Expected special-tokens mask: the golden leaves it out when all zeros.
json special_mask(const json& expected, size_t n) {
  return expected.contains("special") ? expected["special"] : json(std::vector<uint32_t>(n, 0));
}

void check_decodes(const Tokenizer& tok, const json& expected, const std::vector<uint32_t>& ids) {
  const std::string keep = expected["decoded"].get<std::string>();
  EXPECT_EQ(tok.decode(ids, false), keep);
  EXPECT_EQ(tok.decode(ids, true), expected.value("decoded_skip", keep));
}

void check_pipeline(const json& file, const json& p) {
  const std::string name = p["name"];
  SCOPED_TRACE(name);
  json tokenizer = p["tokenizer"];
  tokenizer["model"] = file["model"];
  tokenizer["model"].update(p["model_overrides"]);
  put_charsmap(tokenizer);
  kiln::testing::TempDir dir;
  dir.write("tokenizer.json", tokenizer.dump());
  dir.write("tokenizer_config.json", p["config"].dump());
  const Tokenizer tok = Tokenizer::from_pretrained(dir.path().string());

  const json& texts = file["texts"];
  for (size_t k = 0; k < p["texts"].size(); ++k) {
    const std::string text = texts[p["texts"][k].get<size_t>()];
    const json& expected = p["encodings"][k];
    SCOPED_TRACE("text: '" + text + "'");
    const Encoding e = tok.encode(text);
    EXPECT_EQ(json(e.ids), expected["ids"]);
    EXPECT_EQ(json(flat_offsets(e)), expected["offsets"]);
    EXPECT_EQ(json(e.special_tokens_mask), special_mask(expected, e.size()));
    check_decodes(tok, expected, e.ids);
  }
  for (size_t k = 0; k < file["pairs"].size(); ++k) {
    const json& pair = file["pairs"][k];
    const json& expected = p["pairs"][k];
    SCOPED_TRACE("pair: '" + pair[0].get<std::string>() + "', '" + pair[1].get<std::string>() + "'");
    const Encoding e = tok.encode_pair(pair[0].get<std::string>(), pair[1].get<std::string>());
    EXPECT_EQ(json(e.ids), expected["ids"]);
    EXPECT_EQ(json(e.type_ids), expected["type_ids"]);
    EXPECT_EQ(json(flat_offsets(e)), expected["offsets"]);
    EXPECT_EQ(json(e.special_tokens_mask), special_mask(expected, e.size()));
  }
  for (const json& d : p["decodes"]) {
    SCOPED_TRACE("decode " + d["ids"].dump());
    check_decodes(tok, d, d["ids"].get<std::vector<uint32_t>>());
  }
}

class Pipelines : public ::testing::TestWithParam<const char*> {};

TEST_P(Pipelines, AgreeWithHuggingFace) {
  const json file = load(std::string("tokenizers/pipelines_") + GetParam() + ".json");
  ASSERT_FALSE(file["pipelines"].empty());
  for (const json& p : file["pipelines"]) check_pipeline(file, p);
}

INSTANTIATE_TEST_SUITE_P(Families, Pipelines,
                         ::testing::Values("bytelevel", "spm_bpe", "unigram", "wordpiece", "components", "unicode"));

}  // namespace
