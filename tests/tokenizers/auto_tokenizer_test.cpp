// Tokenizer::from_pretrained against transformers 5's AutoTokenizer: model
// directories whose tokenizer.json the tokenizer class rebuilds (goldens from
// tests/goldens/gen_autotokenizer_goldens.py), and the errors and warnings
// for what kiln cannot rebuild.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/core/json.h"
#include "kiln/core/file.h"
#include "kiln/tokenizers/tokenizer.h"
#include "kiln/tokenizers/transformers_classes.h"
#include "support/test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace kiln::tokenizers;
using kiln::testing::error_of;

namespace {

const fs::path kAuto = fs::path(KILN_TEST_DATA_DIR) / "tokenizers" / "auto";

std::vector<uint32_t> ids_of(const json& j) { return j.get<std::vector<uint32_t>>(); }

// A scratch model directory: a golden case's tokenizer.json and the given
// tokenizer_config.json.
struct ScratchDir {
  fs::path path;
  ScratchDir(const std::string& from_case, const json& config) {
    path = fs::temp_directory_path() / ("kiln_auto_tok_" + from_case + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
    fs::copy_file(kAuto / from_case / "tokenizer.json", path / "tokenizer.json");
    std::ofstream(path / "tokenizer_config.json") << config.dump();
  }
  ~ScratchDir() { fs::remove_all(path); }
};

TEST(AutoTokenizer, MatchesTransformersOnEveryGoldenDirectory) {
  size_t cases = 0;
  for (const auto& entry : fs::directory_iterator(kAuto)) {
    const fs::path dir = entry.path();
    const json exp = kiln::read_json_file(dir / "expected.json");
    SCOPED_TRACE(dir.filename().string() + " (" + exp["class"].get<std::string>() + ")");
    const Tokenizer tok = Tokenizer::from_pretrained(dir.string());
    ASSERT_EQ(exp["texts"].size(), exp["encode"].size());
    for (size_t i = 0; i < exp["texts"].size(); ++i) {
      const std::string text = exp["texts"][i];
      const json& e = exp["encode"][i];
      SCOPED_TRACE("text " + json(text).dump());
      const Encoding enc = tok.encode(text, true);
      EXPECT_EQ(enc.ids, ids_of(e["ids"]));
      EXPECT_EQ(tok.encode(text, false).ids, ids_of(e["ids_no_special"]));
      EXPECT_EQ(tok.decode(ids_of(e["ids"]), true), e["decode_skip"].get<std::string>());
      EXPECT_EQ(tok.decode(ids_of(e["ids"]), false), e["decode_keep"].get<std::string>());
    }
    for (const json& p : exp["pairs"]) {
      SCOPED_TRACE("pair " + p["a"].dump() + " " + p["b"].dump());
      EXPECT_EQ(tok.encode_pair(p["a"].get<std::string>(), p["b"].get<std::string>()).ids, ids_of(p["ids"]));
    }
    for (auto it = exp["special_tokens"].begin(); it != exp["special_tokens"].end(); ++it) {
      SCOPED_TRACE(it.key() + "_token");
      EXPECT_EQ(tok.token_to_id((*it)[0].get<std::string>()), (*it)[1].get<uint32_t>());
      ASSERT_EQ(tok.special_tokens.count(it.key() + "_token"), 1u);
      EXPECT_EQ(tok.special_tokens.at(it.key() + "_token").content, (*it)[0].get<std::string>());
      EXPECT_EQ(tok.special_tokens.at(it.key() + "_token").id, (*it)[1].get<uint32_t>());
    }
    EXPECT_EQ(tok.special_tokens.size(), exp["special_tokens"].size());
    ++cases;
  }
  EXPECT_EQ(cases, 30u);
}

TEST(AutoTokenizer, PicksTheClassTransformersPicks) {
  const json cases = kiln::read_json_file(kAuto.parent_path() / "auto_classes.json");
  ASSERT_EQ(cases.size(), 200u);
  const fs::path dir = fs::temp_directory_path() / ("kiln_auto_tok_classes_" + std::to_string(::getpid()));
  for (const json& c : cases) {
    const std::string hub = c["tokenizer_class"], model_type = c["model_type"], source = c["tokenizer_json"];
    SCOPED_TRACE(source + " tokenizer_class '" + hub + "' model_type '" + model_type + "'");
    fs::remove_all(dir);
    fs::create_directories(dir);
    if (!model_type.empty()) std::ofstream(dir / "config.json") << json{{"model_type", model_type}}.dump();
    const json cfg = hub.empty() ? json::object() : json{{"tokenizer_class", hub}};
    const std::string text = kiln::read_file(kAuto / source / "tokenizer.json");
    EXPECT_EQ(auto_tokenizer_class(dir, cfg, text), c["class"].get<std::string>());
  }
  fs::remove_all(dir);
}

TEST(AutoTokenizer, FromFileStillRunsTheFileAsWritten) {
  // Llama 2's legacy file prepends a "▁" to text that already starts with a
  // space; LlamaTokenizer's Metaspace does not.
  const Tokenizer file = Tokenizer::from_file((kAuto / "llama2_legacy" / "tokenizer.json").string());
  const Tokenizer pretrained = Tokenizer::from_pretrained((kAuto / "llama2_legacy").string());
  EXPECT_EQ(file.encode("  x", false).ids.size(), pretrained.encode("  x", false).ids.size() + 1);
}

TEST(AutoTokenizer, UnknownClassRunsTheFileWithOneWarning) {
  ScratchDir dir("llama2", json{{"tokenizer_class", "KilnTestUnknownTokenizer"}});
  testing::internal::CaptureStderr();
  const Tokenizer tok = Tokenizer::from_pretrained(dir.path.string());
  const Tokenizer again = Tokenizer::from_pretrained(dir.path.string());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("KilnTestUnknownTokenizer"), std::string::npos) << err;
  EXPECT_NE(err.find("tokenizer_config.json"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning"), err.rfind("warning")) << "warned twice: " << err;
  const Tokenizer file = Tokenizer::from_file((dir.path / "tokenizer.json").string());
  EXPECT_EQ(tok.encode("  leading spaces").ids, file.encode("  leading spaces").ids);
}

TEST(AutoTokenizer, ClassOverTheWrongModelIsAnError) {
  ScratchDir dir("llama2", json{{"tokenizer_class", "BertTokenizer"}});
  const std::string err = error_of([&] { Tokenizer::from_pretrained(dir.path.string()); });
  EXPECT_NE(err.find("model.type"), std::string::npos) << err;
  EXPECT_NE(err.find("BertTokenizer"), std::string::npos) << err;
  EXPECT_NE(err.find("WordPiece"), std::string::npos) << err;
  EXPECT_NE(err.find("found BPE"), std::string::npos) << err;
}

TEST(AutoTokenizer, BadFlagIsAnErrorNamingTheKey) {
  ScratchDir dir("llama2", json{{"tokenizer_class", "LlamaTokenizer"}, {"legacy", "yes"}});
  const std::string err = error_of([&] { Tokenizer::from_pretrained(dir.path.string()); });
  EXPECT_NE(err.find("tokenizer_config.json"), std::string::npos) << err;
  EXPECT_NE(err.find("'legacy'"), std::string::npos) << err;
  ScratchDir bad_token("llama2", json{{"tokenizer_class", "LlamaTokenizer"}, {"bos_token", 7}});
  const std::string err2 = error_of([&] { Tokenizer::from_pretrained(bad_token.path.string()); });
  EXPECT_NE(err2.find("'bos_token'"), std::string::npos) << err2;
  ScratchDir bad_added("llama2", json{{"tokenizer_class", "LlamaTokenizer"},
                                      {"added_tokens_decoder", {{"x1", {{"content", "<t>"}}}}}});
  const std::string err3 = error_of([&] { Tokenizer::from_pretrained(bad_added.path.string()); });
  EXPECT_NE(err3.find("'added_tokens_decoder'"), std::string::npos) << err3;
  EXPECT_NE(err3.find("'x1' is not a token id"), std::string::npos) << err3;
}

// A Mistral directory saved before transformers 5 with a tokenizer of over
// 100000 tokens: fix_mistral_regex swaps the first split of the
// pre-tokenizer for Mistral's corrected regex (digits one at a time).
TEST(AutoTokenizer, FixMistralRegexReplacesTheSplit) {
  json tj = kiln::read_json_file(kAuto / "llama3" / "tokenizer.json");
  uint32_t next = 0;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it)
    next = std::max(next, it->get<uint32_t>() + 1);
  for (const json& a : tj["added_tokens"]) next = std::max(next, a["id"].get<uint32_t>() + 1);
  for (uint32_t i = 0; i < 100001; ++i) tj["model"]["vocab"]["zzfill" + std::to_string(i)] = next + i;
  auto make_dir = [&](const std::string& name, bool fix) {
    const fs::path d = fs::temp_directory_path() / ("kiln_auto_tok_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    std::ofstream(d / "tokenizer.json") << tj.dump();
    std::ofstream(d / "config.json") << R"({"model_type": "mistral", "transformers_version": "4.50.0"})";
    std::ofstream(d / "tokenizer_config.json") << json{{"tokenizer_class", "LlamaTokenizerFast"}, {"fix_mistral_regex", fix}}.dump();
    return d;
  };
  const fs::path fixed_dir = make_dir("mistral_fix", true), plain_dir = make_dir("mistral_plain", false);
  const Tokenizer fixed = Tokenizer::from_pretrained(fixed_dir.string());
  const Tokenizer plain = Tokenizer::from_pretrained(plain_dir.string());
  json want = tj;
  want["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
      R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|)"
      R"( ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const Tokenizer expect_fixed = Tokenizer::from_json_string(want.dump(), "want");
  const Tokenizer expect_plain = Tokenizer::from_json_string(tj.dump(), "plain");
  for (const char* text : {"12345 3.14 HeLLoWorld", "x/y\n\nz", "ÀÉÎàéî ABCdef"}) {
    EXPECT_EQ(fixed.encode(text).ids, expect_fixed.encode(text).ids) << text;
    EXPECT_EQ(plain.encode(text).ids, expect_plain.encode(text).ids) << text;
  }
  EXPECT_NE(fixed.encode("12345").ids, plain.encode("12345").ids);
  fs::remove_all(fixed_dir);
  fs::remove_all(plain_dir);
}

TEST(AutoTokenizer, EmptyPairIsOneTextButKeptInBatches) {
  // transformers: tokenizer("a", "") encodes "a" alone; a batch keeps the pair.
  const Tokenizer tok = Tokenizer::from_pretrained((kAuto / "bert_flags").string());
  EXPECT_EQ(tok.encode_pair("a", "").ids, tok.encode("a").ids);
  const auto batch = tok.encode_batch_pairs({{"a", ""}});
  EXPECT_EQ(batch[0].ids.size(), tok.encode("a").ids.size() + 1);  // the second [SEP]
  const Tokenizer file = Tokenizer::from_file((kAuto / "bert_flags" / "tokenizer.json").string());
  EXPECT_EQ(file.encode_pair("a", "").ids.size(), file.encode("a").ids.size() + 1);
}

}  // namespace
