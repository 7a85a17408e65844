// Small tokenizers (tools/goldens/tokenizers/gen_component_goldens.js) that
// exercise the components one family at a time; expected outputs come from
// Hugging Face's implementation.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/tokenizers/tokenizer.h"

using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

json components() {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/tokenizers/components.json");
  return json::parse(in);
}

json offsets_json(const Encoding& e) {
  json o = json::array();
  for (auto [a, b] : e.offsets) o.push_back({a, b});
  return o;
}

TEST(Components, AgreeWithHuggingFace) {
  json all = components();
  ASSERT_GE(all.size(), 6u);
  for (const json& spec : all) {
    SCOPED_TRACE(spec["name"].get<std::string>());
    Tokenizer tok = Tokenizer::from_json_string(spec["tokenizer"].dump(), spec["name"]);
    for (const json& c : spec["cases"]) {
      std::string text = c["text"];
      SCOPED_TRACE("text: '" + text + "'");
      Encoding e = tok.encode(text);
      EXPECT_EQ(json(e.tokens), c["tokens"]);
      EXPECT_EQ(json(e.ids), c["ids"]);
      EXPECT_EQ(offsets_json(e), c["offsets"]);
      EXPECT_EQ(json(e.type_ids), c["type_ids"]);
      EXPECT_EQ(json(e.special_tokens_mask), c["special_tokens_mask"]);
      EXPECT_EQ(tok.decode(e.ids, false), c["decoded"].get<std::string>());
      EXPECT_EQ(tok.decode(e.ids, true), c["decoded_skip"].get<std::string>());
    }
    const json& p = spec["pair"];
    Encoding e = tok.encode_pair(p["a"].get<std::string>(), p["b"].get<std::string>());
    EXPECT_EQ(json(e.ids), p["ids"]);
    EXPECT_EQ(json(e.type_ids), p["type_ids"]);
    EXPECT_EQ(offsets_json(e), p["offsets"]);
  }
}

}  // namespace
