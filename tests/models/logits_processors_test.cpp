// The logits processors and warpers kiln builds as transformers 5.25 does
// (tests/goldens/logits_processors.json, gen_logits_processors_goldens.py):
// transformers' own processor lists on crafted rows at their boundaries, and
// the token ids its generate() returns with them, greedy and with beams, on
// the tiny GPT-2, Llama and T5 models. The settings are read as a model's
// generation_config.json holds them; wrong ones are errors naming the key.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <tuple>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/generation.h"
#include "kiln/models/generation_config.h"
#include "models/golden_model.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using models::GenerationConfig;
using testing::golden_model;

const nlohmann::json& goldens() {
  static const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/logits_processors.json");
  return j;
}

// A generation_config.json holding `settings`, as apply_generation_config reads it.
GenerationConfig config_from_file(const nlohmann::json& settings) {
  testing::TempDir dir;
  dir.write("generation_config.json", settings.dump());
  GenerationConfig g;
  models::apply_generation_config(dir.path(), g);
  return g;
}

float value_of(const nlohmann::json& v) {
  if (v.is_number()) return v.get<float>();
  const std::string s = v.get<std::string>();
  if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
  return s == "inf" ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
}

std::vector<float> values_of(const nlohmann::json& v) {
  std::vector<float> out;
  for (const auto& x : v) out.push_back(value_of(x));
  return out;
}

bool same_score(float got, float want) {
  if (std::isnan(want) || std::isinf(want)) return std::isnan(want) ? std::isnan(got) : got == want;
  return std::abs(got - want) <= 2e-6f * std::max(1.0f, std::abs(want));
}

// Each row through the processors (and, with do_sample, the warpers) leaves transformers' scores: the same ids
// removed (-inf), the others the same values.
TEST(LogitsProcessors, RowsAsTransformers) {
  const auto& rows = goldens()["rows"];
  ASSERT_GE(rows.size(), 45u);
  for (const auto& row : rows) {
    GenerationConfig g = config_from_file(row["settings"]);
    const auto ids = row["ids"].get<std::vector<int64_t>>();
    const auto eos = row["eos"].get<std::vector<int64_t>>();
    const int64_t input_length = row["input_length"];
    g.max_new_tokens = row["max_length"].get<int64_t>() - input_length;
    const int64_t generated = static_cast<int64_t>(ids.size()) - input_length;
    std::vector<float> scores = values_of(row["logits"]);
    models::apply_logits_processors(scores, {ids, generated, eos}, g);
    // Beam methods keep 1 + #eos tokens (at least 2), plain sampling 1.
    const int64_t keep = row["num_beams"].get<int64_t>() > 1 ? std::max<int64_t>(2, 1 + std::ssize(eos)) : 1;
    if (g.do_sample) models::warp_logits(scores, g, keep);
    models::finish_scores(scores, g);
    const std::vector<float> want = values_of(row["scores"]);
    ASSERT_EQ(scores.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(same_score(scores[i], want[i]))
          << row["settings"].dump() << " ids " << row["ids"].dump() << ": score " << i << " is " << scores[i]
          << ", transformers' " << want[i] << " (" << row["processors"].dump() << ")";
  }
}

// Plain sampling (next_token) draws every id the new warpers keep and none they remove.
TEST(LogitsProcessors, SamplingDrawsWhatTheWarpersKeep) {
  const std::vector<float> row = {0.3f, -1.2f, 2.2f, 0.9f, 1.7f, -0.4f, 1.1f, 0.0f, 2.0f, -2.5f};
  const std::vector<std::tuple<double, double, double>> settings = {{0.5, 0, 0}, {1, 0.1, 0}, {1, 0, 0.3}};
  for (const auto& [typical, epsilon, eta] : settings) {
    GenerationConfig g;
    g.do_sample = true;
    g.top_k = 0;
    g.typical_p = typical;
    g.epsilon_cutoff = epsilon;
    g.eta_cutoff = eta;
    std::vector<float> warped = row;
    models::warp_logits(warped, g, 1);
    std::set<int64_t> kept, drawn;
    for (size_t i = 0; i < warped.size(); ++i)
      if (warped[i] > -std::numeric_limits<float>::infinity()) kept.insert(static_cast<int64_t>(i));
    ASSERT_GT(kept.size(), 1u);
    ASSERT_LT(kept.size(), row.size());
    std::mt19937_64 rng(7);
    for (int n = 0; n < 400; ++n) drawn.insert(models::next_token(row, g, rng, {0}));
    EXPECT_EQ(drawn, kept) << "typical_p " << typical << ", epsilon_cutoff " << epsilon << ", eta_cutoff " << eta;
  }
}

// Beam sampling with the new warpers: the same seed, the same sequences; each within max_new_tokens.
TEST(LogitsProcessors, BeamSamplingWithTheWarpersIsSeeded) {
  GenerationConfig g;
  g.do_sample = true;
  g.num_beams = 3;
  g.max_new_tokens = 5;
  g.typical_p = 0.9;
  g.eta_cutoff = 0.01;
  g.suppress_tokens = {58};
  g.seed = 3;
  const auto first = models::generate(golden_model("gpt2/gpt2_lm"), {{5, 17, 42, 8}}, g);
  EXPECT_EQ(models::generate(golden_model("gpt2/gpt2_lm"), {{5, 17, 42, 8}}, g), first);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_LE(first[0].size(), 9u);
  EXPECT_EQ(std::count(first[0].begin(), first[0].end(), 58), 0);
}

GenerationConfig case_config(const nlohmann::json& c) {
  nlohmann::json settings = c["settings"];
  settings["num_beams"] = c["num_beams"];
  settings["max_new_tokens"] = c["max_new_tokens"];
  settings["eos_token_id"] = c["eos_token_id"];
  return config_from_file(settings);
}

// generate() greedy and with beams returns transformers' ids with each setting.
TEST(LogitsProcessors, GenerateAsTransformers) {
  const auto& cases = goldens()["cases"];
  ASSERT_GE(cases.size(), 100u);
  size_t changed = 0;
  for (const auto& c : cases) {
    const GenerationConfig g = case_config(c);
    const auto prompt = c["prompt"].get<std::vector<int64_t>>();
    const auto out = models::generate(golden_model(c["model"]), {prompt}, g);
    ASSERT_EQ(out.size(), 1u);
    // (With several forced EOS ids the last step's hypotheses tie: torch.topk's order decides, as beam search's.)
    EXPECT_EQ(out[0], c["sequence"].get<std::vector<int64_t>>())
        << c["model"] << ", num_beams " << g.num_beams << ", " << c["settings"].dump();
    const bool t5 = c["model"].get<std::string>().starts_with("t5");
    const auto start = t5 ? 0 : static_cast<std::ptrdiff_t>(prompt.size());
    std::vector<int64_t> generated(out[0].begin() + start, out[0].end());
    changed += generated != c["baseline"].get<std::vector<int64_t>>();
  }
  EXPECT_GE(changed, cases.size() * 9 / 10);  // the settings matter: most cases leave plain greedy decoding
}

// The reference path (no cache) and the batched T5 path choose the same ids.
TEST(LogitsProcessors, SameWithoutCacheAndInBatches) {
  size_t checked = 0;
  for (const auto& c : goldens()["cases"]) {
    if (c["num_beams"] != 1 || ++checked % 4 != 0) continue;
    GenerationConfig g = case_config(c);
    g.use_cache = false;
    const auto prompt = c["prompt"].get<std::vector<int64_t>>();
    EXPECT_EQ(models::generate(golden_model(c["model"]), {prompt}, g)[0], c["sequence"].get<std::vector<int64_t>>())
        << c["model"] << " without cache, " << c["settings"].dump();
    if (!c["model"].get<std::string>().starts_with("t5")) continue;
    g.use_cache = true;
    const auto batch = models::generate(golden_model(c["model"]), {{5, 9, 1}, prompt}, g);
    EXPECT_EQ(batch[1], c["sequence"].get<std::vector<int64_t>>()) << "batched, " << c["settings"].dump();
  }
  EXPECT_GE(checked, 8u);
}

TEST(LogitsProcessors, SettingsFromGenerationConfigFile) {
  const GenerationConfig g = config_from_file(nlohmann::json::parse(R"({
      "typical_p": 0.9, "epsilon_cutoff": 3e-4, "eta_cutoff": 0.002, "suppress_tokens": [1, 2],
      "begin_suppress_tokens": [220], "bad_words_ids": [[5], [7, 8]], "forced_bos_token_id": 0,
      "forced_eos_token_id": [2, 3], "sequence_bias": [[[5], -2.0], [[7, 8], 1]],
      "exponential_decay_length_penalty": [10, 1.5], "renormalize_logits": true, "remove_invalid_values": true})"));
  EXPECT_EQ(g.typical_p, 0.9);
  EXPECT_EQ(g.epsilon_cutoff, 3e-4);
  EXPECT_EQ(g.eta_cutoff, 0.002);
  EXPECT_EQ(g.suppress_tokens, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(g.begin_suppress_tokens, std::vector<int64_t>{220});
  EXPECT_EQ(g.bad_words_ids, (std::vector<std::vector<int64_t>>{{5}, {7, 8}}));
  EXPECT_EQ(g.forced_bos_token_id, 0);
  EXPECT_EQ(g.forced_eos_token_ids, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(g.sequence_bias.size(), 2u);
  EXPECT_EQ(g.sequence_bias[1].first, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(g.sequence_bias[1].second, 1.0);
  ASSERT_TRUE(g.exponential_decay_length_penalty);
  EXPECT_EQ(g.exponential_decay_length_penalty->first, 10);
  EXPECT_EQ(g.exponential_decay_length_penalty->second, 1.5);
  EXPECT_TRUE(g.renormalize_logits);
  EXPECT_TRUE(g.remove_invalid_values);
  EXPECT_EQ(config_from_file({{"forced_eos_token_id", 4}}).forced_eos_token_ids, std::vector<int64_t>{4});
  EXPECT_TRUE(config_from_file({{"bad_words_ids", nlohmann::json::array()}}).bad_words_ids.empty());
}

TEST(LogitsProcessors, WrongTypesInTheFileNameTheKey) {
  auto error = [](const std::string& json) {
    return testing::error_of([&] { config_from_file(nlohmann::json::parse(json)); });
  };
  EXPECT_CONTAINS(error(R"({"typical_p": "high"})"), "generation_config.json: \"typical_p\" must be a number, found");
  EXPECT_CONTAINS(error(R"({"suppress_tokens": [1, "a"]})"), "\"suppress_tokens\" must be a list of token ids, found");
  EXPECT_CONTAINS(error(R"({"begin_suppress_tokens": 3})"), "\"begin_suppress_tokens\" must be a list of token ids");
  EXPECT_CONTAINS(error(R"({"bad_words_ids": [5, 6]})"), "\"bad_words_ids\" must be a list of token-id lists");
  EXPECT_CONTAINS(error(R"({"bad_words_ids": [[5], []]})"), "none empty");
  EXPECT_CONTAINS(error(R"({"forced_bos_token_id": [1]})"), "\"forced_bos_token_id\" must be a token id, found");
  EXPECT_CONTAINS(error(R"({"forced_eos_token_id": "eos"})"), "\"forced_eos_token_id\" must be a token id or a list");
  EXPECT_CONTAINS(error(R"({"sequence_bias": {"5": 1.0}})"), "\"sequence_bias\" must be a list of [[token ids], bias]");
  EXPECT_CONTAINS(error(R"({"sequence_bias": [[[5], "x"]]})"),
                  "\"sequence_bias\" must be a list of [[token ids], bias]");
  EXPECT_CONTAINS(error(R"({"exponential_decay_length_penalty": [1.5, 2]})"),
                  "\"exponential_decay_length_penalty\" must be [start_index, decay_factor]");
  EXPECT_CONTAINS(error(R"({"renormalize_logits": 1})"),
                  "\"renormalize_logits\" must be true or false, found number 1");
}

// Two new ids after {5, 6} on the tiny GPT-2.
std::vector<int64_t> two_more(GenerationConfig g) {
  g.max_new_tokens = 2;
  return models::generate(golden_model("gpt2/gpt2_lm"), {{5, 6}}, g)[0];
}

TEST(LogitsProcessors, ValuesTransformersRefusesAreErrors) {
  auto error = [](const GenerationConfig& g) { return testing::error_of([&] { two_more(g); }); };
  GenerationConfig g;
  g.bad_words_ids = {{5}, {7, 99}};
  EXPECT_CONTAINS(error(g), "bad_words_ids holds token id 99, outside the vocabulary [0, 99)");
  g = GenerationConfig{};
  g.sequence_bias = {{{-1}, 1.0}};
  EXPECT_CONTAINS(error(g), "sequence_bias holds token id -1");
  g = GenerationConfig{};
  g.forced_bos_token_id = 120;
  EXPECT_CONTAINS(error(g), "forced_bos_token_id holds token id 120");
  g = GenerationConfig{};
  g.forced_eos_token_ids = {3, 4};
  g.suppress_tokens = {4, 3, 9};
  EXPECT_CONTAINS(error(g), "every forced_eos_token_id is also in suppress_tokens");
  g.forced_eos_token_ids = {3, 5};  // one forced id left: transformers accepts it
  EXPECT_EQ(two_more(g).back(), 5);
  g = GenerationConfig{};
  g.do_sample = true;
  g.typical_p = 0;
  EXPECT_CONTAINS(error(g), "typical_p must be in (0, 1] (1 = off), got 0");
  g.typical_p = 1;
  g.epsilon_cutoff = 1;
  EXPECT_CONTAINS(error(g), "epsilon_cutoff must be in [0, 1) (0 = off), got 1");
  g.epsilon_cutoff = 0;
  g.eta_cutoff = -0.5;
  EXPECT_CONTAINS(error(g), "eta_cutoff must be in [0, 1) (0 = off), got -0.5");
  g.do_sample = false;  // greedy decoding builds no warpers: nothing to refuse
  EXPECT_EQ(two_more(g).size(), 4u);
}

}  // namespace
}  // namespace kiln
