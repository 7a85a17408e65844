// stop_strings and max_time (stopping_criteria.h): the text transformers
// 5.25's StopStringCriteria reads for each token of three small tokenizers
// (byte-level, byte-fallback, metaspace), what it decides on crafted id
// sequences, and the ids generate() returns with stop strings on the tiny
// GPT-2, Llama and T5 models, greedy and with beams
// (tests/goldens/stop_strings.json, gen_stop_strings_goldens.py); max_time
// by its behaviour: at most one new token once it has passed.
#include <filesystem>
#include <memory>
#include <string>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "kiln/models/stopping_criteria.h"
#include "models/golden_model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using testing::golden_model;
namespace fs = std::filesystem;

const nlohmann::json& goldens() {
  static const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/stop_strings.json");
  return j;
}

fs::path tokenizer_dir(const std::string& kind) { return fs::path(KILN_TEST_DATA_DIR) / "stop_strings" / kind; }

const tokenizers::Tokenizer& tokenizer(const std::string& kind) {
  static std::map<std::string, tokenizers::Tokenizer> loaded;
  if (!loaded.count(kind)) loaded[kind] = tokenizers::Tokenizer::from_pretrained(tokenizer_dir(kind).string());
  return loaded[kind];
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

models::StopStringMode mode_named(const nlohmann::json& name) {
  if (name.is_null()) return models::StopStringMode::Text;
  return name == "byte_level" ? models::StopStringMode::ByteLevel : models::StopStringMode::ByteFallback;
}

TEST(StopStrings, TokenTextsAsTransformersReadsThem) {
  for (const auto& [kind, t] : goldens()["tokenizers"].items()) {
    const models::StopStringMode mode = models::stop_string_mode(tokenizer_dir(kind));
    EXPECT_EQ(mode, mode_named(t["mode"])) << kind;
    const auto texts = models::stop_string_token_texts(tokenizer(kind), mode);
    ASSERT_EQ(texts.size(), t["token_bytes"].size()) << kind;
    for (size_t id = 0; id < texts.size(); ++id) {
      ASSERT_TRUE(texts[id].has_value()) << kind << " id " << id;
      EXPECT_EQ(*texts[id], from_hex(t["token_bytes"][id])) << kind << " id " << id;
    }
  }
}

TEST(StopStrings, MatchesAsStopStringCriteria) {
  int stopped = 0;
  for (const auto& [kind, t] : goldens()["tokenizers"].items()) {
    ASSERT_GE(t["rows"].size(), 100u);
    for (const auto& row : t["rows"]) {
      const auto strings = row["stop_strings"].get<std::vector<std::string>>();
      const auto stop = models::StopStrings::from_tokenizer(strings, tokenizer(kind), tokenizer_dir(kind));
      EXPECT_EQ(stop.matches(row["ids"].get<std::vector<int64_t>>()), row["stops"].get<bool>())
          << kind << ": ids " << row["ids"] << ", stop_strings " << row["stop_strings"];
      stopped += row["stops"].get<bool>();
    }
  }
  EXPECT_GT(stopped, 100);  // the rows hold both answers
}

TEST(StopStrings, GenerateStopsAsTransformers) {
  int shorter = 0;
  for (const auto& c : goldens()["cases"]) {
    models::GenerationConfig g;
    g.max_new_tokens = 12;
    g.num_beams = c["num_beams"];
    g.stop_strings = c["stop_strings"].get<std::vector<std::string>>();
    const std::string kind = c["tokenizer"];
    g.stop_string_matcher = std::make_shared<const models::StopStrings>(
        models::StopStrings::from_tokenizer(g.stop_strings, tokenizer(kind), tokenizer_dir(kind)));
    const auto out = models::generate(golden_model(c["model"]), {c["prompt"].get<std::vector<int64_t>>()}, g);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], c["sequence"].get<std::vector<int64_t>>())
        << c["model"] << ", num_beams " << g.num_beams << ", stop_strings " << c["stop_strings"];
    shorter += c["sequence"].size() < c["baseline"].size();
  }
  EXPECT_GE(shorter, 15);
}

TEST(StopStrings, BadSettingsAreErrors) {
  const auto texts = models::stop_string_token_texts(tokenizer("metaspace"), models::StopStringMode::Text);
  EXPECT_CONTAINS(testing::error_of([&] { models::StopStrings({"ok", ""}, texts, models::StopStringMode::Text); }),
                  "an empty string");
  EXPECT_CONTAINS(testing::error_of([&] { models::StopStrings({"\x01"}, texts, models::StopStringMode::Text); }),
                  "no token of the tokenizer can end any of the stop strings");
  models::GenerationConfig g;
  g.stop_strings = {"stop"};
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, g); }),
                  "need the model's tokenizer");
  g.stop_string_matcher = std::make_shared<const models::StopStrings>(std::vector<std::string>{"end"}, texts,
                                                                      models::StopStringMode::Text);
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, g); }),
                  "differ from those the tokenizer's matcher was built for");
  g = models::GenerationConfig{};
  g.max_time = -1;
  EXPECT_CONTAINS(testing::error_of([&] { models::generate(golden_model("t5/t5_relu_tied"), {{5, 1}}, g); }),
                  "max_time must be a number of seconds >= 0, got -1");
}

// max_time 0 has passed after the first new token: every sequence stops there, a prefix of the plain output (for
// beam search, the best first token). A generous max_time changes nothing.
TEST(MaxTime, StopsEveryRowOnceItHasPassed) {
  for (const char* name : {"gpt2/gpt2_lm", "llama/llama_lm", "t5/t5_relu_tied"}) {
    const bool t5 = std::string(name).starts_with("t5");
    const std::vector<std::vector<int64_t>> prompts = {{5, 17, 42, 8}, {4, 20, 31, 9, 1}};
    for (int64_t beams : {1, 3}) {
      models::GenerationConfig g;
      g.max_new_tokens = 10;
      g.num_beams = beams;
      g.eos_token_ids = {-1};  // nothing else stops them
      const auto plain = models::generate(golden_model(name), prompts, g);
      g.max_time = 1e6;
      EXPECT_EQ(models::generate(golden_model(name), prompts, g), plain) << name;
      g.max_time = 0;
      const auto out = models::generate(golden_model(name), prompts, g);
      ASSERT_EQ(out.size(), plain.size());
      for (size_t i = 0; i < out.size(); ++i) {
        const size_t prompt = t5 ? 0 : prompts[i].size();
        ASSERT_EQ(out[i].size(), prompt + 1) << name << " beams " << beams << " row " << i;
        if (beams == 1) {
          EXPECT_TRUE(std::equal(out[i].begin(), out[i].end(), plain[i].begin())) << name << " row " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln
