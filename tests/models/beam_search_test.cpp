// Beam search: the token ids transformers 5.25's generate() returns
// (tests/goldens/beam_search.json, gen_beam_goldens.py) for the tiny GPT-2,
// Llama and T5 models over num_beams, length_penalty, early_stopping,
// num_return_sequences and the logits processors; the cached decoding equals
// recomputing every hypothesis; bad settings are clear errors.
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/beam_search.h"
#include "kiln/models/generation.h"
#include "kiln/models/generation_config.h"
#include "support/temp_dir.h"
#include "models/golden_model.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using models::GenerationConfig;

using testing::golden_model;

GenerationConfig config_of(const nlohmann::json& c) {
  GenerationConfig g;
  g.num_beams = c["num_beams"];
  g.length_penalty = c["length_penalty"];
  const auto& es = c["early_stopping"];
  g.early_stopping = models::parse_early_stopping(es.is_string() ? es.get<std::string>() : es.dump());
  g.num_return_sequences = c["num_return_sequences"];
  g.repetition_penalty = c["repetition_penalty"];
  g.no_repeat_ngram_size = c["no_repeat_ngram_size"];
  if (c["eos_token_id"].is_number()) g.eos_token_ids = {c["eos_token_id"].get<int64_t>()};  // a list: the config's
  g.max_new_tokens = c["max_new_tokens"];
  return g;
}

const nlohmann::json& cases() {
  static const nlohmann::json j = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/beam_search.json");
  return j["cases"];
}

std::vector<std::vector<int64_t>> expected(const nlohmann::json& c) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& per_prompt : c["sequences"])
    for (const auto& seq : per_prompt) out.push_back(seq.get<std::vector<int64_t>>());
  return out;
}

// The case's model; one whose case lists several EOS ids from a copy of its directory whose config.json lists them.
models::PreTrainedModel& model_of(const nlohmann::json& c) {
  if (!c["eos_token_id"].is_array()) return golden_model(c["model"]);
  static testing::TempDir dir;
  const std::string name = c["model"].get<std::string>() + "_eos_" + c["eos_token_id"].dump();
  static std::map<std::string, std::unique_ptr<models::PreTrainedModel>> models;
  auto& m = models[name];
  if (!m) {
    const std::filesystem::path src = std::string(KILN_TEST_DATA_DIR) + "/" + c["model"].get<std::string>();
    const std::filesystem::path copy = dir / std::to_string(models.size());
    std::filesystem::create_directories(copy);
    std::filesystem::copy_file(src / "model.safetensors", copy / "model.safetensors");
    nlohmann::json config = read_json_file(src / "config.json");
    config["eos_token_id"] = c["eos_token_id"];
    io::write_json_file_atomic(copy / "config.json", config);
    m = models::from_pretrained(copy);
  }
  return *m;
}

TEST(BeamSearch, TokenIdsAsTransformers) {
  ASSERT_GE(cases().size(), 50u);
  size_t multi_eos = 0;
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.dump().substr(0, 300));
    const auto prompts = c["prompts"].get<std::vector<std::vector<int64_t>>>();
    EXPECT_EQ(models::generate(model_of(c), prompts, config_of(c)), expected(c));
    multi_eos += c["eos_token_id"].is_array();
  }
  EXPECT_GE(multi_eos, 9u);
}

TEST(BeamSearch, CachedEqualsRecomputed) {
  size_t i = 0;
  for (const auto& c : cases()) {
    if (i++ % 6 != 0) continue;  // recomputing compiles per length: a sample of the cases
    SCOPED_TRACE(c.dump().substr(0, 300));
    GenerationConfig g = config_of(c);
    g.use_cache = false;
    const auto prompts = c["prompts"].get<std::vector<std::vector<int64_t>>>();
    EXPECT_EQ(models::generate(model_of(c), prompts, g), expected(c));
  }
}

TEST(BeamSearch, BadSettingsAreClearErrors) {
  auto& gpt2 = golden_model("gpt2/gpt2_lm");
  GenerationConfig g;
  g.num_beams = 2;
  g.num_return_sequences = 3;
  EXPECT_NE(testing::error_of([&] { models::generate(gpt2, {{1, 2}}, g); }).find("num_return_sequences (3) has to be smaller or equal to num_beams (2)"), std::string::npos);
  g.num_return_sequences = 1;
  g.num_beams = 0;
  EXPECT_NE(testing::error_of([&] { models::generate(gpt2, {{1, 2}}, g); }).find("num_beams must be >= 1, got 0"), std::string::npos);
  // More beams than any machine holds scores for: refused before allocating them (no out-of-memory kill).
  g.num_beams = int64_t{1} << 40;
  const std::string huge = testing::error_of([&] { models::generate(gpt2, {{1, 2}}, g); });
  EXPECT_NE(huge.find("GB of scores and caches, more than this machine's"), std::string::npos) << huge;
  EXPECT_NE(huge.find("lower --num_beams"), std::string::npos) << huge;
  EXPECT_NE(testing::error_of([] { models::parse_early_stopping("sometimes"); }).find("got 'sometimes'"), std::string::npos);
  EXPECT_EQ(models::parse_early_stopping("True"), GenerationConfig::EarlyStopping::True);
  EXPECT_EQ(models::parse_early_stopping("never"), GenerationConfig::EarlyStopping::Never);
}

// generation_config.json's beam settings (or config.json's when there is none); wrong types name file and key.
TEST(GenerationConfigFile, BeamSettingsFromTheModelDirectory) {
  testing::TempDir dir;
  GenerationConfig g;
  models::apply_generation_config("", g);  // no directory: nothing
  EXPECT_EQ(g.num_beams, 1);
  dir.write("config.json", R"({"num_beams": 4, "length_penalty": 2.0, "no_repeat_ngram_size": 3})");
  models::apply_generation_config(dir.path(), g);
  EXPECT_EQ(g.num_beams, 4);
  EXPECT_EQ(g.length_penalty, 2.0);
  EXPECT_EQ(g.no_repeat_ngram_size, 3);
  dir.write("generation_config.json",
            R"({"num_beams": 3, "early_stopping": "never", "num_return_sequences": 2, "do_sample": true})");
  g = GenerationConfig{};
  models::apply_generation_config(dir.path(), g);
  EXPECT_EQ(g.num_beams, 3);
  EXPECT_EQ(g.length_penalty, 1.0);  // the generation config wins whole: config.json is not read
  EXPECT_EQ(g.early_stopping, GenerationConfig::EarlyStopping::Never);
  EXPECT_EQ(g.num_return_sequences, 2);
  EXPECT_TRUE(g.do_sample);
  auto error = [&](const std::string& json) {
    dir.write("generation_config.json", json);
    return testing::error_of([&] { models::apply_generation_config(dir.path(), g); });
  };
  EXPECT_CONTAINS(error(R"({"early_stopping": true, "length_penalty": "long"})"),
                  "generation_config.json: \"length_penalty\" must be a number, found");
  EXPECT_CONTAINS(error(R"({"max_new_tokens": "ten"})"), "\"max_new_tokens\" must be an integer, found");
  EXPECT_CONTAINS(error(R"({"eos_token_id": [1, "x"]})"), "\"eos_token_id\" must be a token id or a list of them");
  EXPECT_CONTAINS(error(R"({"eos_token_id": []})"), "\"eos_token_id\" must be a token id or a list of them");
  EXPECT_CONTAINS(error(R"({"do_sample": 1})"), "\"do_sample\" must be true or false, found");
  EXPECT_CONTAINS(error(R"({"top_k": 2.5})"), "\"top_k\" must be an integer");
}

// Settings kiln does not build are named in a warning, once per file, not
// dropped unsaid; their neutral values (older config.json files carry them
// all) say nothing.
TEST(GenerationConfigFile, SettingsKilnDoesNotBuildAreWarnedAbout) {
  testing::TempDir dir, other;
  dir.write("config.json", R"({"min_length": 0, "typical_p": 1.0, "bad_words_ids": null, "suppress_tokens": [],
      "forced_bos_token_id": null, "num_beam_groups": 1, "renormalize_logits": false, "top_k": 5})");
  GenerationConfig g;
  ::testing::internal::CaptureStderr();
  models::apply_generation_config(dir.path(), g);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(g.top_k, 5);
  other.write("generation_config.json", R"({"min_new_tokens": 5, "num_beam_groups": 2, "force_words_ids": [[3, 4]],
      "top_p": 0.9, "guidance_scale": 1.5, "token_healing": true, "min_length": 9, "typical_p": 0.5})");
  ::testing::internal::CaptureStderr();
  models::apply_generation_config(other.path(), g);
  models::apply_generation_config(other.path(), g);
  const std::string warned = ::testing::internal::GetCapturedStderr();
  EXPECT_CONTAINS(warned, "generation_config.json: token_healing true not applied");  // (the others: applied, or hub_methods)
  EXPECT_EQ(warned.find("kiln: warning"), warned.rfind("kiln: warning")) << warned;
  EXPECT_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.min_new_tokens, 5);  // applied
  EXPECT_EQ(g.min_length, 9);
  EXPECT_EQ(g.typical_p, 0.5);  // applied: not named
}

// The sampling settings and stop ids an instruct model ships (Llama 3.1's,
// Qwen2.5's generation_config.json), and max_length against max_new_tokens.
TEST(GenerationConfigFile, SamplingSettingsAndStopIds) {
  testing::TempDir dir;
  dir.write("generation_config.json", R"({"bos_token_id": 128000, "do_sample": true, "eos_token_id": [128001, 128008,
      128009], "temperature": 0.6, "top_p": 0.9, "top_k": 20, "repetition_penalty": 1.05, "transformers_version": "4.45"})");
  GenerationConfig g;
  EXPECT_EQ(g.top_k, 50);  // transformers' default
  models::apply_generation_config(dir.path(), g);
  EXPECT_TRUE(g.do_sample);
  EXPECT_EQ(g.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(g.temperature, 0.6);
  EXPECT_EQ(g.top_p, 0.9);
  EXPECT_EQ(g.top_k, 20);
  EXPECT_EQ(g.repetition_penalty, 1.05);
  EXPECT_FALSE(g.max_length);
  dir.write("generation_config.json", R"({"max_length": 30, "eos_token_id": 7})");
  g = GenerationConfig{};
  models::apply_generation_config(dir.path(), g);
  EXPECT_EQ(g.max_length, 30);
  EXPECT_EQ(g.eos_token_ids, std::vector<int64_t>{7});
  dir.write("generation_config.json", R"({"max_length": 30, "max_new_tokens": 5})");
  g = GenerationConfig{};
  models::apply_generation_config(dir.path(), g);
  EXPECT_FALSE(g.max_length);  // max_new_tokens wins, as in transformers
  EXPECT_EQ(g.max_new_tokens, 5);
}

// Zero new tokens gives the prompts back, num_return_sequences times each.
TEST(BeamSearch, NothingToGenerate) {
  models::BeamSearch search({{4, 5}}, {1}, [] {
    GenerationConfig g;
    g.num_beams = 3;
    g.num_return_sequences = 2;
    g.max_new_tokens = 0;
    return g;
  }());
  EXPECT_TRUE(search.done());
  EXPECT_EQ(search.results(), (std::vector<std::vector<int64_t>>{{4, 5}, {4, 5}}));
}

// Two beams over a 4-token vocabulary with hand-made log-probs: the first
// step keeps only beam 0's continuations, EOS (3) among the best num_beams
// becomes a finished hypothesis scored log p / length ** length_penalty.
TEST(BeamSearch, EosFinishesAHypothesisAndMaxLengthTheRest) {
  GenerationConfig g;
  g.num_beams = 2;
  g.max_new_tokens = 2;
  g.length_penalty = 1.0;
  models::BeamSearch search({{0}}, {3}, g);
  auto row = [](std::vector<float> p) {
    for (float& x : p) x = std::log(x);
    return p;
  };
  auto cat = [](std::vector<float> a, const std::vector<float>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // Step 1: EOS is the best token (0.5): it finishes; 1 and 2 run on.
  auto parents = search.step(cat(row({0.01f, 0.3f, 0.19f, 0.5f}), row({0.25f, 0.25f, 0.25f, 0.25f})), 4);
  EXPECT_EQ(parents, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(search.running(), (std::vector<std::vector<int64_t>>{{0, 1}, {0, 2}}));
  ASSERT_FALSE(search.done());
  // Step 2 reaches max length, so every candidate finishes: log(0.3 * 0.9) / 2 = -0.65 beats [0,3]'s
  // log(0.5) / 1 = -0.69 and [0,2,0]'s log(0.19 * 0.9) / 2 = -0.88.
  search.step(cat(row({0.05f, 0.05f, 0.9f, 0.0001f}), row({0.9f, 0.05f, 0.04f, 0.01f})), 4);
  EXPECT_TRUE(search.done());
  EXPECT_EQ(search.results(), (std::vector<std::vector<int64_t>>{{0, 1, 2}}));
}

}  // namespace
}  // namespace kiln
