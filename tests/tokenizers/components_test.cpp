// Small tokenizers (tests/goldens/tokenizers/gen_component_goldens.js and
// gen_more_component_goldens.js) that exercise the components one family at
// a time; expected outputs come from Hugging Face's implementation.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/tokenizers/bpe.h"
#include "kiln/tokenizers/tokenizer.h"
#include "kiln/tokenizers/unicode.h"
#include "kiln/tokenizers/utf8.h"

using nlohmann::json;
using namespace kiln::tokenizers;

namespace {

json load(const char* name) {
  std::ifstream in(std::string(KILN_TEST_DATA_DIR) + "/tokenizers/" + name);
  return json::parse(in);
}

json offsets_json(const Encoding& e) {
  json o = json::array();
  for (auto [a, b] : e.offsets) o.push_back({a, b});
  return o;
}

void check_spec(const json& spec) {
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
  for (const json& d : spec.value("decodes", json::array())) {
    auto ids = d["ids"].get<std::vector<uint32_t>>();
    EXPECT_EQ(tok.decode(ids, false), d["decoded"].get<std::string>()) << d["ids"];
    EXPECT_EQ(tok.decode(ids, true), d["decoded_skip"].get<std::string>()) << d["ids"];
  }
}

TEST(Components, AgreeWithHuggingFace) {
  json all = load("components.json");
  ASSERT_GE(all.size(), 6u);
  for (const json& spec : all) check_spec(spec);
}

// BPE dropout (off and always), the ByteLevel normalizer, UnicodeScripts and
// the CTC decoder.
TEST(Components, MoreAgreeWithHuggingFace) {
  json all = load("more_components.json");
  ASSERT_EQ(all["specs"].size(), 8u);
  size_t decodes = 0;
  for (const json& spec : all["specs"]) {
    check_spec(spec);
    decodes += spec["decodes"].size();
  }
  EXPECT_EQ(decodes, 24u);
}

// tokenizers draws dropout from an unseeded RNG: compare how often each
// segmentation comes out, 20000 encodings on each side.
TEST(Components, BpeDropoutMatchesHuggingFaceInDistribution) {
  json g = load("more_components.json")["dropout"];
  size_t compared = 0;
  for (const json& s : g["samples"]) {
    json spec = g["tokenizer"];
    spec["model"]["dropout"] = s["dropout"];
    Tokenizer tok = Tokenizer::from_json_string(spec.dump(), "dropout");
    dynamic_cast<const Bpe&>(tok.model()).seed_dropout(20240601);
    const size_t n = s["n"];
    const std::string word = s["word"];
    std::map<std::string, size_t> ours;
    for (size_t i = 0; i < n; ++i) {
      std::string key;
      for (const auto& t : tok.encode(word, false).tokens) key += (key.empty() ? "" : "|") + t;
      ++ours[key];
    }
    std::map<std::string, size_t> theirs;
    for (auto it = s["counts"].begin(); it != s["counts"].end(); ++it) theirs[it.key()] = it.value();
    std::map<std::string, bool> keys;
    for (auto& [k, c] : ours) keys[k] = true;
    for (auto& [k, c] : theirs) keys[k] = true;
    for (auto& [k, unused] : keys) {
      double a = double(ours[k]) / n, b = double(theirs[k]) / n, p = (a + b) / 2;
      double tolerance = 5 * std::sqrt(p * (1 - p) * 2 / n) + 1e-3;
      EXPECT_NEAR(a, b, tolerance) << "dropout " << s["dropout"] << " word '" << word
                                   << "' segmentation " << k;
      ++compared;
    }
  }
  EXPECT_GT(compared, 80u);
}

std::vector<char32_t> sweep_chunk(char32_t lo, char32_t n) {
  std::vector<char32_t> cps;
  for (char32_t c = lo; c < lo + n; ++c) {
    if (c < 0xD800 || c > 0xDFFF) cps.push_back(c);
  }
  return cps;
}

// Every code point: where UnicodeScripts splits them in order, and which have
// no script.
TEST(Components, UnicodeScriptsEveryCodePoint) {
  json g = load("more_components.json")["scripts"];
  Tokenizer tok = Tokenizer::from_json_string(
      R"({"pre_tokenizer": {"type": "UnicodeScripts"},
          "model": {"type": "WordLevel", "vocab": {"[UNK]": 0}, "unk_token": "[UNK]"}})",
      "unicode_scripts");
  const char32_t chunk = g["sweep_chunk"];
  std::vector<uint32_t> starts;
  for (char32_t lo = 0; lo < 0x110000; lo += chunk) {
    std::vector<char32_t> cps = sweep_chunk(lo, chunk);
    std::string text;
    for (char32_t c : cps) text += utf8::encode(c);
    for (auto [a, b] : tok.encode(text).offsets) starts.push_back(cps[a]);
  }
  EXPECT_EQ(json(starts), g["sweep_starts"]);

  std::vector<std::pair<uint32_t, uint32_t>> any;
  for (char32_t c = 0; c <= 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    bool none = c < 0x110000 && unicode::tokenizers_script(c) == unicode::kAnyScript;
    if (none && (any.empty() || any.back().second != 0xFFFFFFFF)) any.emplace_back(c, 0xFFFFFFFF);
    if (!none && !any.empty() && any.back().second == 0xFFFFFFFF) any.back().second = c - 1;
  }
  json got = json::array();
  for (auto [a, b] : any) got.push_back({a, b});
  EXPECT_EQ(got, g["any_ranges"]);

  // The scripts themselves: every code point with a script belongs to the
  // run of the sweep it falls in; the runs' classes must be kiln's scripts
  // one for one.
  const json& runs = g["runs"];
  std::map<int, int> class_of;   // kiln script -> HF class
  std::map<int, int> script_of;  // HF class -> kiln script
  size_t run = 0, mismatches = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    while (run + 1 < runs.size() && runs[run + 1][0].get<uint32_t>() <= c) ++run;
    int script = unicode::tokenizers_script(c);
    if (script == unicode::kAnyScript) continue;
    int cls = runs[run][1];
    auto [a, fresh_a] = class_of.emplace(script, cls);
    auto [b, fresh_b] = script_of.emplace(cls, script);
    if (a->second != cls || b->second != script) {
      if (++mismatches <= 20) {
        ADD_FAILURE() << "U+" << std::hex << uint32_t(c) << std::dec << ": kiln script " << script
                      << " (HF class " << a->second << "), HF class " << cls << " (kiln script "
                      << b->second << ")";
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(script_of.size(), 135u);

  size_t checked = 0;
  for (const json& r : g["random"]) {
    EXPECT_EQ(offsets_json(tok.encode(r["text"].get<std::string>())), r["offsets"]) << r["text"];
    ++checked;
  }
  EXPECT_EQ(checked, 3000u);
}

}  // namespace
