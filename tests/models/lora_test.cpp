// LoRA (models/lora.h) against Hugging Face PEFT: adapters PEFT wrote load
// and give PEFT's logits, loss and adapter gradients (goldens from
// tests/goldens/gen_lora_goldens.py); kiln's adapters round-trip; frozen
// weights get no gradient and no weight-gradient product in the step.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "kiln/compiler/compile.h"
#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"
#include "models/golden_inputs.h"
#include "support/program_util.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using models::LoraConfig;

fs::path data(const std::string& rel) { return fs::path(KILN_TEST_DATA_DIR) / rel; }

::testing::AssertionResult close(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << to_string(got.shape()) << " vs " << to_string(want.shape());
  return testing::all_close(got.to_vector<double>(), want.to_vector<double>(), rtol, atol);
}

struct Case {
  const char* name;
  const char* base;
};
class LoraGolden : public ::testing::TestWithParam<Case> {};

TEST_P(LoraGolden, PeftAdapterGivesPeftLogitsLossAndGradients) {
  const Case c = GetParam();
  // As the CLI loads it: a base whose vocabulary the adapter resized is rebuilt.
  auto model = models::from_pretrained_with_adapter(data(c.base), data(std::string("lora/") + c.name + "/adapter"));
  model->eval();
  auto golden = io::load_safetensors(data(std::string("lora/") + c.name + "/golden.safetensors"));
  models::ModelOutputs out = model->forward(testing::golden_inputs(golden));
  EXPECT_TRUE(close(out.logits, golden.at("logits"), 1e-4, 1e-5)) << "logits";
  EXPECT_TRUE(close(out.loss, golden.at("loss"), 1e-5, 1e-6)) << "loss";
  out.loss.backward();
  int checked = 0;
  for (auto& [key, p] : models::adapter_state(*model)) {
    auto it = golden.find("grad." + key);
    ASSERT_NE(it, golden.end()) << "no golden gradient for " << key;
    ASSERT_TRUE(p.grad().defined()) << key;
    double scale = 0;
    for (double v : it->second.to_vector<double>()) scale = std::max(scale, std::abs(v));
    EXPECT_TRUE(close(p.grad(), it->second, 1e-4, std::max(1e-6, 4e-6 * scale))) << "grad of " << key;
    ++checked;
  }
  EXPECT_EQ(checked, std::count_if(golden.begin(), golden.end(), [](auto& g) { return g.first.rfind("grad.", 0) == 0; }));
  // What kiln writes for it is what PEFT wrote: the same tensors (names,
  // shapes) and the same LoRA settings, so PEFT loads it with no missing or
  // unexpected keys.
  testing::TempDir tmp;
  const fs::path peft_dir = data(std::string("lora/") + c.name + "/adapter");
  models::save_adapter(*model, tmp.path());
  auto ours = io::SafetensorsFile::open(tmp.path() / "adapter_model.safetensors");
  auto theirs = io::SafetensorsFile::open(peft_dir / "adapter_model.safetensors");
  // PEFT also saves the tables of a model it finds resized against its base
  // directory's config; kiln saves the adapter only.
  const bool resized = std::string(c.name).find("resized") != std::string::npos;
  size_t compared = 0;
  for (const auto& e : theirs.entries()) {
    const bool table = e.name.find("embed_tokens.") != std::string::npos || e.name.find("wte.") != std::string::npos ||
                       e.name.find("lm_head.") != std::string::npos;
    if (resized && table && !ours.find(e.name) && e.name.find("lora_") == std::string::npos) continue;
    // bias "all" also saves a saved module's biases as PEFT's wrapper holds
    // them (its trained copy again, and the base's); PEFT loads without them.
    if (e.name.find(".modules_to_save.") != std::string::npos || e.name.find(".original_module.") != std::string::npos)
      continue;
    ++compared;
    ASSERT_TRUE(ours.find(e.name)) << e.name;
    EXPECT_EQ(ours.find(e.name)->shape, e.shape) << e.name;
  }
  EXPECT_EQ(ours.entries().size(), compared);
  nlohmann::json mine = read_json_file(tmp.path() / "adapter_config.json");
  nlohmann::json peft = read_json_file(peft_dir / "adapter_config.json");
  for (const char* key : {"peft_type", "task_type", "r", "lora_alpha", "lora_dropout", "fan_in_fan_out", "use_rslora",
                          "use_dora", "modules_to_save", "rank_pattern", "alpha_pattern", "bias", "exclude_modules",
                          "trainable_token_indices"})
    EXPECT_EQ(mine[key], peft[key]) << key;
  EXPECT_EQ(mine.value("lora_bias", false), peft.value("lora_bias", false));
  auto as_set = [](const nlohmann::json& j) { return std::set<std::string>(j.begin(), j.end()); };
  EXPECT_EQ(as_set(mine["target_modules"]), as_set(peft["target_modules"]));
  // PEFT writes a single layer or pattern as given (1, "layer"); kiln as a list of one.
  auto as_list = [](const nlohmann::json& j) { return j.is_null() || j.is_array() ? j : nlohmann::json::array({j}); };
  for (const char* key : {"layers_to_transform", "layers_pattern"})
    EXPECT_EQ(as_list(mine[key]), as_list(peft[key])) << key;
  // The base is frozen: no gradient reaches any of its weights.
  std::set<std::string> trained;  // by parameter name (a trained bias is keyed under its layer's base_layer)
  std::map<const void*, std::string> name_of;
  for (auto& [name, p] : model->named_parameters()) name_of[p.impl().get()] = name;
  for (auto& [key, p] : models::adapter_state(*model)) trained.insert(name_of.at(p.impl().get()));
  for (auto& [name, p] : model->named_parameters()) {
    EXPECT_EQ(p.requires_grad(), trained.count(name) == 1) << name;
    if (!trained.count(name)) {
      EXPECT_FALSE(p.grad().defined()) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Peft, LoraGolden,
                         ::testing::Values(Case{"bert_seqcls", "bert/bert_seqcls"},
                                           Case{"roberta_seqcls_all_linear", "bert/roberta_seqcls"},
                                           Case{"gpt2_lm", "gpt2/gpt2_lm"}, Case{"t5", "t5/t5_gated_untied"},
                                           Case{"llama_lm_all_linear", "llama/llama_lm"},
                                           Case{"qwen2_lm_rslora", "llama/qwen2_lm_tied"},
                                           Case{"llama_lm_embed", "llama/llama_lm"},
                                           Case{"gpt2_lm_wte", "gpt2/gpt2_lm"},
                                           Case{"bert_seqcls_word_embeddings", "bert/bert_seqcls"},
                                           Case{"llama_lm_exclude_regex", "llama/llama_lm"},
                                           Case{"llama_lm_save_embed", "llama/llama_lm"},
                                           Case{"llama_lm_resized", "llama/llama_lm"},
                                           Case{"gpt2_lm_resized", "gpt2/gpt2_lm"},
                                           Case{"bert_seqcls_dora", "bert/bert_seqcls"},
                                           Case{"llama_lm_dora", "llama/llama_lm"},
                                           Case{"gpt2_lm_dora", "gpt2/gpt2_lm"},
                                           Case{"llama_lm_layers", "llama/llama_lm"},
                                           Case{"bert_seqcls_layers_pattern", "bert/bert_seqcls"},
                                           Case{"bert_seqcls_bias_all", "bert/bert_seqcls"},
                                           Case{"gpt2_lm_bias_lora_only", "gpt2/gpt2_lm"},
                                           Case{"llama_lm_lora_bias", "llama/llama_lm"},
                                           Case{"llama_lm_tokens", "llama/llama_lm"},
                                           Case{"llama_lm_tokens_head", "llama/llama_lm"},
                                           Case{"qwen2_lm_tokens_tied", "llama/qwen2_lm_tied"},
                                           Case{"gpt2_lm_tokens", "gpt2/gpt2_lm"},
                                           Case{"bert_seqcls_tokens", "bert/bert_seqcls"},
                                           Case{"qwen2_lm_tokens_resized", "llama/qwen2_lm_tied"}),
                         [](const auto& info) { return std::string(info.param.name); });

std::map<std::string, Tensor> llama_golden() { return io::load_safetensors(data("lora/llama_lm_all_linear/golden.safetensors")); }

TEST(Lora, FreshAdapterLeavesTheModelAsItWasAndTrainsOnlyTheBranches) {
  auto golden = llama_golden();
  auto model = models::from_pretrained(data("llama/llama_lm"));
  model->eval();
  Tensor before = model->forward(testing::golden_inputs(golden)).logits;
  LoraConfig cfg;
  cfg.r = 4;
  models::apply_lora(*model, cfg);
  ASSERT_TRUE(model->lora_config());
  EXPECT_EQ(model->lora_config()->target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(model->lora_config()->task_type, "CAUSAL_LM");
  EXPECT_TRUE(close(model->forward(testing::golden_inputs(golden)).logits, before, 0, 0));
  int trainable = 0;
  for (auto& [name, p] : model->named_parameters()) {
    if (!p.requires_grad()) continue;
    ++trainable;
    EXPECT_TRUE(name.find("self_attn.q_proj.lora_") != std::string::npos ||
                name.find("self_attn.v_proj.lora_") != std::string::npos)
        << name;
    auto v = p.to_vector<double>();
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0; })) << name;
    } else {  // Kaiming-uniform(a=√5) on [r, in]: U(-1/√in, 1/√in)
      const double bound = 1 / std::sqrt(static_cast<double>(p.shape()[1]));
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [&](double x) { return std::abs(x) <= bound; })) << name;
      EXPECT_GT(*std::max_element(v.begin(), v.end()), bound / 2) << name;
    }
  }
  EXPECT_EQ(trainable, 2 * 2 * 2);  // 2 layers × (q, v) × (A, B)
}

// DoRA's magnitude starts at each row's weight norm, so a fresh adapter
// leaves the outputs as they were; a step trains the magnitudes and the
// branches (dropout active: both products read the dropped input).
TEST(Lora, FreshDoraAdapterLeavesTheModelAsItWasAndTrainsItsMagnitudes) {
  auto golden = llama_golden();
  auto model = models::from_pretrained(data("llama/llama_lm"));
  model->eval();
  Tensor before = model->forward(testing::golden_inputs(golden)).logits;
  LoraConfig cfg;
  cfg.r = 4;
  cfg.use_dora = true;
  cfg.lora_dropout = 0.2;
  models::apply_lora(*model, cfg);
  EXPECT_TRUE(close(model->forward(testing::golden_inputs(golden)).logits, before, 1e-6, 1e-6));
  Tensor magnitude;
  for (auto& [name, p] : model->named_parameters())
    if (name == "model.layers.0.self_attn.q_proj.lora_magnitude_vector") magnitude = p;
  ASSERT_TRUE(magnitude.defined());
  EXPECT_TRUE(magnitude.requires_grad());
  model->train();
  Tensor loss = model->forward(testing::golden_inputs(golden)).loss;
  loss.backward();
  int with_grad = 0;
  for (auto& [key, p] : models::adapter_state(*model)) with_grad += p.grad().defined();
  EXPECT_EQ(with_grad, 2 * 2 * 3);  // 2 layers × (q, v) × (A, B, magnitude)
  ASSERT_TRUE(magnitude.grad().defined());
  auto g = magnitude.grad().to_vector<double>();
  EXPECT_TRUE(std::any_of(g.begin(), g.end(), [](double v) { return v != 0; }));
  nlohmann::json j = cfg.to_json();
  EXPECT_EQ(j["use_dora"], true);
  EXPECT_TRUE(LoraConfig::from_json(j, "adapter_config.json").use_dora);
}

// In eval mode DoRA keeps the norm of W + ΔW between forwards (decoding
// computes it once); a new value of B makes it compute the norm again.
TEST(Lora, DoraNormKeptInEvalModeFollowsNewWeights) {
  auto model = models::from_pretrained_with_adapter(data("llama/llama_lm"), data("lora/llama_lm_dora/adapter"));
  model->eval();
  auto golden = io::load_safetensors(data("lora/llama_lm_dora/golden.safetensors"));
  const models::ModelInputs inputs = testing::golden_inputs(golden);
  EXPECT_TRUE(close(model->forward(inputs).logits, golden.at("logits"), 1e-4, 1e-5));
  EXPECT_TRUE(close(model->forward(inputs).logits, golden.at("logits"), 1e-4, 1e-5));  // the kept norm
  for (auto& [name, p] : model->named_parameters())
    if (name.find("lora_B") != std::string::npos) {
      NoGradGuard no_grad;
      p.assign(p * 3.0);
    }
  const Tensor kept = model->forward(inputs).logits;
  model->train();  // no dropout in this adapter: the same function, every norm computed afresh
  const Tensor fresh = model->forward(inputs).logits;
  EXPECT_TRUE(close(kept, fresh, 1e-5, 1e-6));
  EXPECT_FALSE(close(kept, golden.at("logits"), 1e-2, 1e-2));
}

TEST(Lora, KilnAdapterRoundTripsThroughPeftFiles) {
  testing::TempDir tmp;
  auto golden = io::load_safetensors(data("lora/gpt2_lm/golden.safetensors"));
  auto model = models::from_pretrained(data("gpt2/gpt2_lm"));
  model->eval();
  LoraConfig cfg;
  cfg.r = 2;
  cfg.lora_alpha = 5;
  models::apply_lora(*model, cfg);
  EXPECT_TRUE(model->lora_config()->fan_in_fan_out);  // GPT-2's Conv1D, as PEFT sets it
  {
    NoGradGuard no_grad;
    for (auto& [key, p] : models::adapter_state(*model)) p.assign(p + 0.3);
  }
  Tensor want = model->forward(testing::golden_inputs(golden)).logits;
  models::save_adapter(*model, tmp.path() / "adapter");
  nlohmann::json j = read_json_file(tmp.path() / "adapter" / "adapter_config.json");
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], 2);
  EXPECT_EQ(j["lora_alpha"], 5);
  EXPECT_TRUE(j["lora_alpha"].is_number_integer());
  EXPECT_EQ(j["fan_in_fan_out"], true);
  EXPECT_EQ(j["target_modules"], nlohmann::json({"c_attn"}));
  for (const char* key : {"bias", "modules_to_save", "use_rslora", "use_dora", "rank_pattern", "alpha_pattern",
                          "init_lora_weights", "layers_to_transform", "base_model_name_or_path", "inference_mode"})
    EXPECT_TRUE(j.contains(key)) << key;
  auto fresh = models::from_pretrained(data("gpt2/gpt2_lm"));
  fresh->eval();
  models::load_adapter(*fresh, tmp.path() / "adapter");
  EXPECT_TRUE(close(fresh->forward(testing::golden_inputs(golden)).logits, want, 0, 0));
}

TEST(Lora, MergeFoldsTheAdapterIntoTheWeights) {
  for (const auto& [name, base] : {std::pair{"gpt2_lm", "gpt2/gpt2_lm"}, {"llama_lm_all_linear", "llama/llama_lm"},
                                   {"bert_seqcls", "bert/bert_seqcls"}, {"bert_seqcls_dora", "bert/bert_seqcls"},
                                   {"llama_lm_dora", "llama/llama_lm"}, {"gpt2_lm_dora", "gpt2/gpt2_lm"},
                                   {"bert_seqcls_bias_all", "bert/bert_seqcls"},
                                   {"gpt2_lm_bias_lora_only", "gpt2/gpt2_lm"}, {"llama_lm_tokens_head", "llama/llama_lm"},
                                   {"qwen2_lm_tokens_tied", "llama/qwen2_lm_tied"}, {"gpt2_lm_tokens", "gpt2/gpt2_lm"},
                                   {"bert_seqcls_tokens", "bert/bert_seqcls"}}) {
    auto golden = io::load_safetensors(data(std::string("lora/") + name + "/golden.safetensors"));
    auto model = models::from_pretrained(data(base));
    model->eval();
    models::load_adapter(*model, data(std::string("lora/") + name + "/adapter"));
    models::merge_lora(*model);
    EXPECT_FALSE(model->lora_config());
    for (auto& [n, p] : model->named_parameters()) {
      EXPECT_EQ(n.find("lora_"), std::string::npos) << n;
      EXPECT_TRUE(p.requires_grad()) << n;
    }
    EXPECT_TRUE(close(model->forward(testing::golden_inputs(golden)).logits, golden.at("logits"), 1e-4, 1e-5)) << name;
  }
}

// lora_bias folds scaling · lora_B's bias into the layer's bias; a layer
// without one (Llama's projections) cannot take it, as in PEFT: an error
// before anything is merged.
TEST(Lora, LoraBiasWithoutALayerBiasDoesNotMerge) {
  auto model = models::from_pretrained(data("llama/llama_lm"));
  models::load_adapter(*model, data("lora/llama_lm_lora_bias/adapter"));
  const std::string e = testing::error_of([&] { models::merge_lora(*model); });
  EXPECT_CONTAINS(e, "model.layers.0.self_attn.q_proj has a lora_bias but no bias of its own");
  EXPECT_TRUE(model->lora_config());
  EXPECT_EQ(models::adapter_state(*model).size(), 12u);
}

// A fresh adapter with PEFT's bias settings: "all" trains every bias (and
// keys an adapted layer's under base_layer), "lora_only" the adapted layers'
// own; lora_B's bias starts at zero, so the logits are the base model's.
TEST(Lora, FreshAdapterTrainsTheBiasesItsBiasSettingNames) {
  auto golden = io::load_safetensors(data("lora/bert_seqcls/golden.safetensors"));
  for (const char* bias : {"all", "lora_only"}) {
    auto model = models::from_pretrained(data("bert/bert_seqcls"));
    model->eval();
    const Tensor before = model->forward(testing::golden_inputs(golden)).logits;
    LoraConfig cfg;
    cfg.bias = bias;
    cfg.lora_bias = true;
    models::apply_lora(*model, cfg);
    EXPECT_TRUE(close(model->forward(testing::golden_inputs(golden)).logits, before, 0, 0)) << bias;
    std::set<std::string> keys;
    for (auto& [key, p] : models::adapter_state(*model)) keys.insert(key);
    const std::string layer = "base_model.model.bert.encoder.layer.0.attention.";
    EXPECT_TRUE(keys.count(layer + "self.query.base_layer.bias")) << bias;
    EXPECT_TRUE(keys.count(layer + "self.query.lora_B.bias")) << bias;
    EXPECT_EQ(keys.count(layer + "self.key.bias"), std::string(bias) == "all") << bias;
    EXPECT_EQ(keys.count(layer + "output.LayerNorm.bias"), std::string(bias) == "all") << bias;
    for (auto& [name, p] : model->named_parameters()) {
      const bool base_bias = name.size() > 5 && name.ends_with(".bias") && name.find("lora_") == std::string::npos &&
                             name.find("classifier") == std::string::npos;
      if (base_bias) {
        const bool adapted = name.find(".query.") != std::string::npos || name.find(".value.") != std::string::npos;
        EXPECT_EQ(p.requires_grad(), std::string(bias) == "all" || adapted) << bias << " " << name;
      }
    }
  }
}

// Fresh trainable tokens start as the table's rows (the logits do not
// change) and only they train; what PEFT refuses, and what kiln's single tied
// table cannot do, are errors naming the setting.
TEST(Lora, TrainableTokensStartAsTheTableAndBadSettingsAreErrors) {
  auto golden = llama_golden();
  for (const char* base : {"llama/llama_lm", "llama/qwen2_lm_tied"}) {
    auto model = models::from_pretrained(data(base));
    model->eval();
    const Tensor before = model->forward(testing::golden_inputs(golden)).logits;
    LoraConfig cfg;
    cfg.trainable_token_indices[""] = {4, 9};
    models::apply_lora(*model, cfg);
    // A tied head computes the chosen columns in a product of their own: the same values up to rounding.
    EXPECT_TRUE(close(model->forward(testing::golden_inputs(golden)).logits, before, 1e-5, 1e-6)) << base;
    const std::string key = "base_model.model.model.embed_tokens.token_adapter.trainable_tokens_delta";
    bool found = false;
    for (auto& [k, p] : models::adapter_state(*model))
      if (k == key) {
        found = true;
        EXPECT_EQ(p.shape(), (Shape{2, 32}));
        EXPECT_TRUE(p.requires_grad());
      }
    EXPECT_TRUE(found) << base;
    for (auto& [name, p] : model->named_parameters()) {
      if (name == "model.embed_tokens.weight") {
        EXPECT_FALSE(p.requires_grad());
      }
    }
  }
  auto error = [&](const char* base, const std::map<std::string, std::vector<int64_t>>& tokens,
                   std::vector<std::string> targets = {}, std::vector<std::string> saved = {}) {
    auto model = models::from_pretrained(data(base));
    LoraConfig cfg;
    cfg.trainable_token_indices = tokens;
    cfg.target_modules = std::move(targets);
    cfg.modules_to_save = std::move(saved);
    return testing::error_of([&] { models::apply_lora(*model, cfg); });
  };
  EXPECT_CONTAINS(error("llama/llama_lm", {{"", {3, 99}}}), "token 99 is out of range for model.embed_tokens (99 rows)");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"", {-1}}}), "token -1 is out of range");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"", {3, 3}}}), "token 3 is listed twice");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"", {}}}), "trainable_token_indices lists no token");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"nothing", {1}}}), "trainable_token_indices 'nothing' names no embedding");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"q_proj", {1}}}), "'model.layers.0.self_attn.q_proj' is no embedding table");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"embed_tokens", {1}}}, {"embed_tokens"}),
                  "names model.embed_tokens, which target_modules adapts too");
  EXPECT_CONTAINS(error("llama/llama_lm", {{"embed_tokens", {1}}}, {}, {"embed_tokens"}),
                  "'embed_tokens' is in modules_to_save too");
  EXPECT_CONTAINS(error("llama/qwen2_lm_tied", {{"embed_tokens", {1}}, {"lm_head", {2}}}),
                  "gives 'lm_head' other tokens than the input embeddings this Qwen2ForCausalLM ties it to");
  EXPECT_CONTAINS(error("t5/t5_gated_untied", {{"", {1}}}), "T5's shared table");
  const std::string file = "dir/adapter_config.json";
  auto read_error = [&](const std::string& text) {
    return testing::error_of([&] { LoraConfig::from_json(nlohmann::json::parse(text), file); });
  };
  EXPECT_CONTAINS(read_error(R"({"peft_type": "LORA", "trainable_token_indices": "3"})"),
                  "dir/adapter_config.json: 'trainable_token_indices' must be a list of token ids or an object");
  EXPECT_CONTAINS(read_error(R"({"peft_type": "LORA", "trainable_token_indices": [1.5]})"),
                  "'trainable_token_indices' must be a non-empty list of token ids, got [1.5]");
  EXPECT_CONTAINS(read_error(R"({"peft_type": "LORA", "trainable_token_indices": {"embed_tokens": []}})"),
                  "'trainable_token_indices.embed_tokens' must be a non-empty list of token ids, got []");
  const LoraConfig both = LoraConfig::from_json(
      nlohmann::json::parse(R"({"peft_type": "LORA", "trainable_token_indices": {"embed_tokens": [1], "lm_head": [2, 3]}})"),
      file);
  EXPECT_EQ(both.trainable_token_indices.at("lm_head"), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(both.to_json()["trainable_token_indices"], nlohmann::json::parse(R"({"embed_tokens": [1], "lm_head": [2, 3]})"));
}

// A branch on the output head (PEFT adapts lm_head when target_modules names
// it) changes the logits as merging it into the head's weight does; PEFT
// also saves the targeted head's own weight ("lm_head.base_layer.weight",
// save_embedding_layers) and loads it back into the base.
TEST(Lora, OutputHeadBranchComputesAndPeftsSavedHeadWeightLoads) {
  testing::TempDir tmp;
  auto golden = io::load_safetensors(data("llama/llama_lm/golden.safetensors"));
  const models::ModelInputs inputs = testing::golden_inputs(golden);
  auto adapted = models::from_pretrained(data("llama/llama_lm"));
  adapted->eval();
  LoraConfig cfg;
  cfg.target_modules = {"q_proj", "lm_head"};
  models::apply_lora(*adapted, cfg);
  Generator gen(5);
  auto state = models::adapter_state(*adapted);
  for (auto& [key, p] : state)
    if (key.find("lora_B") != std::string::npos) p.assign(randn(p.shape(), gen) * 0.2);
  const Tensor logits = adapted->forward(inputs).logits;
  models::merge_lora(*adapted);
  EXPECT_TRUE(close(logits, adapted->forward(inputs).logits, 1e-4, 1e-5));

  // The adapter file as PEFT writes it: the head's weight (here halved) under
  // its base_layer infix, which loading puts into the base's head.
  auto head_of = [](models::PreTrainedModel& m) {
    for (auto& [name, p] : m.named_parameters())
      if (name == "lm_head.weight") return p;
    return Tensor();
  };
  auto base = models::from_pretrained(data("llama/llama_lm"));
  const Tensor halved = head_of(*base) * 0.5;
  state.emplace_back("base_model.model.lm_head.base_layer.weight", halved);
  const fs::path dir = tmp.path() / "peft";
  models::apply_lora(*base, cfg);
  models::save_adapter(*base, dir);
  io::save_safetensors(dir / "adapter_model.safetensors", state, {{"format", "pt"}});
  auto loaded = models::from_pretrained(data("llama/llama_lm"));
  models::load_adapter(*loaded, dir);
  EXPECT_TRUE(close(head_of(*loaded), halved, 0, 0));

  // A head of another vocabulary (PEFT saves a resized one the same way).
  state.back().second = zeros({7, halved.dim(1)}, DType::f32);
  io::save_safetensors(dir / "adapter_model.safetensors", state, {{"format", "pt"}});
  auto other = models::from_pretrained(data("llama/llama_lm"));
  std::string e = testing::error_of([&] { models::load_adapter(*other, dir); });
  EXPECT_CONTAINS(e, "tensor 'base_model.model.lm_head.base_layer.weight' has shape [7,32]");
  EXPECT_CONTAINS(e, "a vocabulary of 7, the base model's 99");
}

// A head tied to the input embeddings is no layer of kiln's model: naming it
// is an error, where PEFT would adapt transformers' head module; a model with
// no language-model head ignores the name, as PEFT does.
TEST(Lora, TiedOutputHeadAsATargetIsAClearError) {
  for (const auto& [base, layer] : {std::pair{"llama/qwen2_lm_tied", "q_proj"}, {"gpt2/gpt2_lm", "c_attn"}}) {
    auto m = models::from_pretrained(data(base));
    LoraConfig cfg;
    cfg.target_modules = {layer, "lm_head"};
    std::string e = testing::error_of([&] { models::apply_lora(*m, cfg); });
    EXPECT_CONTAINS(e, "target module 'lm_head' is the output head, which this " + m->architecture() +
                           " ties to its input embeddings");
  }
  auto m = models::from_pretrained(data("bert/bert_seqcls"));
  LoraConfig cfg;
  cfg.target_modules = {"query", "lm_head"};
  EXPECT_NO_THROW(models::apply_lora(*m, cfg));
}

// The weight-gradient products of a step: matrix products whose result has a
// frozen weight's shape ([out, in], or [in, out] transposed).
int frozen_weight_products(const models::PreTrainedModel& model, const std::vector<Tensor>& results) {
  std::set<Shape> frozen;
  for (auto& [name, p] : model.named_parameters())
    if (p.rank() == 2 && name.find("lora_") == std::string::npos && name.find("embed") == std::string::npos) {
      frozen.insert(p.shape());
      frozen.insert(Shape{p.shape()[1], p.shape()[0]});
    }
  testing::TracedProgram t = testing::trace_program(results);
  int n = 0;
  for (const auto& in : t.program.instrs)
    if (!in.fused && in.op == ir::Op::MatMul && frozen.count(in.output.view.shape)) ++n;
  return n;
}

TEST(Lora, StepHasNoWeightGradientProductForFrozenWeights) {
  auto golden = llama_golden();
  auto step = [&](bool lora) {
    auto model = models::from_pretrained(data("llama/llama_lm"));
    model->eval();
    if (lora) {
      LoraConfig cfg;
      cfg.r = 4;
      cfg.target_modules = {"all-linear"};
      models::apply_lora(*model, cfg);
    }
    Tensor loss = model->forward(testing::golden_inputs(golden)).loss;
    loss.backward();
    std::vector<Tensor> results{loss};
    for (auto& [name, p] : model->named_parameters())
      if (p.grad().defined()) results.push_back(p.grad());
    return frozen_weight_products(*model, results);
  };
  EXPECT_GT(step(false), 0);  // full fine-tuning has them: the count sees them
  EXPECT_EQ(step(true), 0);
}

TEST(Lora, Errors) {
  testing::TempDir tmp;
  auto model = [] { return models::from_pretrained(data("llama/llama_lm")); };
  auto write_config = [&](const std::string& text) {
    fs::create_directories(tmp.path() / "a");
    std::ofstream(tmp.path() / "a" / "adapter_config.json") << text;
    return tmp.path() / "a";
  };
  {
    auto m = model();
    LoraConfig cfg;
    cfg.target_modules = {"query", "nothing"};
    std::string e = testing::error_of([&] { models::apply_lora(*m, cfg); });
    EXPECT_CONTAINS(e, "match no Linear, Conv1D or Embedding layer");
    EXPECT_CONTAINS(e, "model.layers.0.self_attn.q_proj");
  }
  {
    auto m = model();
    std::string e = testing::error_of([&] { models::load_adapter(*m, write_config(R"({"peft_type": "IA3"})")); });
    EXPECT_CONTAINS(e, "adapter_config.json");
    EXPECT_CONTAINS(e, "peft_type 'IA3' is not supported");
  }
  {  // PEFT's checks of bias and lora_bias
    auto error = [&](const std::string& text) {
      auto m = model();
      return testing::error_of([&] { models::load_adapter(*m, write_config(text)); });
    };
    EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "bias": "some"})"),
                    "adapter_config.json: 'bias' must be \"none\", \"all\" or \"lora_only\", got \"some\"");
    EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "bias": 1})"), "'bias' must be \"none\", \"all\" or \"lora_only\", got 1");
    EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "lora_bias": true, "use_dora": true})"),
                    "'lora_bias' true is not supported with 'use_dora' true");
    EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "lora_bias": true, "target_modules": ["embed_tokens"]})"),
                    "lora_bias on the embedding table model.embed_tokens is not supported");
    EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "lora_bias": "yes"})"), "'lora_bias' must be true or false");
    auto m = model();
    LoraConfig cfg;
    cfg.bias = "lora";
    EXPECT_CONTAINS(testing::error_of([&] { models::apply_lora(*m, cfg); }), "LoRA: 'bias' must be");
  }
  {
    auto m = model();
    std::string e = testing::error_of([&] {
      models::load_adapter(
          *m, write_config(R"({"peft_type": "LORA", "r": 4, "use_dora": true, "target_modules": ["embed_tokens"]})"));
    });
    EXPECT_CONTAINS(e, "adapter_config.json");
    EXPECT_CONTAINS(e, "use_dora on the embedding table model.embed_tokens is not supported");
  }
  {
    auto m = model();
    LoraConfig cfg;
    cfg.target_modules = {"input_layernorm"};
    EXPECT_CONTAINS(testing::error_of([&] { models::apply_lora(*m, cfg); }),
                    "'model.layers.0.input_layernorm' is a container: kiln's LoRA adapts Linear, Conv1D and Embedding");
  }
  {  // A rank the file's tensors do not have: what an adapter for another base gives.
    const fs::path dir = tmp.path() / "r2";
    fs::create_directories(dir);
    fs::copy_file(data("lora/qwen2_lm_rslora/adapter/adapter_model.safetensors"), dir / "adapter_model.safetensors");
    nlohmann::json j = read_json_file(data("lora/qwen2_lm_rslora/adapter/adapter_config.json"));
    j["r"] = 2;
    io::write_json_file_atomic(dir / "adapter_config.json", j);
    auto m = model();
    std::string e = testing::error_of([&] { models::load_adapter(*m, dir); });
    EXPECT_CONTAINS(e, "adapter_model.safetensors");
    EXPECT_CONTAINS(e, "lora_A.weight' has shape [4,32], the base model needs [2,32]");
  }
  {  // GPT-2's adapter on Llama: its targets name nothing there.
    auto m = model();
    std::string e = testing::error_of([&] { models::load_adapter(*m, data("lora/gpt2_lm/adapter")); });
    EXPECT_CONTAINS(e, "adapter_config.json");
    EXPECT_CONTAINS(e, "c_attn");
  }
}

// PEFT 0.21's LoRA variants compute another forward (or save tensors of
// their own): each is refused by its adapter_config.json key, before any
// tensor is read, as are the initialisations PEFT repeats on the base's
// weights when it loads the adapter.
TEST(Lora, LayersToTransformAreCheckedAsPeftChecksThem) {
  const std::string file = "dir/adapter_config.json";
  auto error = [&](const std::string& text) {
    return testing::error_of([&] { LoraConfig::from_json(nlohmann::json::parse(text), file); });
  };
  auto read = [&](const std::string& text) { return LoraConfig::from_json(nlohmann::json::parse(text), file); };
  EXPECT_EQ(read(R"({"peft_type": "LORA", "layers_to_transform": 3})").layers_to_transform, std::vector<int64_t>{3});
  EXPECT_EQ(read(R"({"peft_type": "LORA", "layers_to_transform": [0, 2], "layers_pattern": ["h", "layers"]})")
                .layers_pattern,
            (std::vector<std::string>{"h", "layers"}));
  EXPECT_TRUE(read(R"({"peft_type": "LORA", "layers_to_transform": [], "layers_pattern": null})")
                  .layers_to_transform.empty());
  EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "layers_to_transform": "1"})"),
                  "dir/adapter_config.json: 'layers_to_transform' must be a layer index or a list of them, got \"1\"");
  EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "layers_to_transform": [1.5]})"), "'layers_to_transform' must be");
  EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "layers_pattern": "layers"})"),
                  "'layers_pattern' is given without 'layers_to_transform'");
  EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "target_modules": "all-linear", "layers_to_transform": [0]})"),
                  "'layers_to_transform' cannot be used when 'target_modules' is a string (\"all-linear\")");
  EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "layers_to_transform": [0], "layers_pattern": 7})"),
                  "'layers_pattern' must be a string or a list of them, got 7");
  EXPECT_CONTAINS(error(R"({"peft_type": "LORA", "layers_to_transform": [0], "layers_pattern": "la(yers"})"),
                  "layers_pattern is not a valid regular expression: invalid regex 'la(yers'");
  // A module named whole takes no layer filter (PEFT's exact-key match); one matched by its suffix does.
  auto model = models::from_pretrained(data("llama/llama_lm"));
  LoraConfig cfg;
  cfg.target_modules = {"model.layers.0.self_attn.q_proj", "v_proj"};
  cfg.layers_to_transform = {1};
  models::apply_lora(*model, cfg);
  std::set<std::string> adapted;
  for (auto& [key, p] : models::adapter_state(*model))
    if (key.find("lora_A") != std::string::npos) adapted.insert(key);
  EXPECT_EQ(adapted, (std::set<std::string>{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                                            "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight"}));
  // A layer index no layer has: nothing to adapt, an error listing the layers.
  auto other = models::from_pretrained(data("llama/llama_lm"));
  cfg.target_modules = {"q_proj"};
  cfg.layers_to_transform = {7};
  EXPECT_CONTAINS(testing::error_of([&] { models::apply_lora(*other, cfg); }), "match no Linear");
}

TEST(Lora, PeftVariantsAndBaseRewritingInitialisationsAreRefusedByTheirKey) {
  const std::string file = "dir/adapter_config.json";
  auto error = [&](const std::string& text) {
    return testing::error_of([&] { LoraConfig::from_json(nlohmann::json::parse(text), file); });
  };
  for (const char* key : {"use_bdlora", "arrow_config", "kasa_config", "monteclora_config", "velora_config"}) {
    std::string e = error(std::string(R"({"peft_type": "LORA", ")") + key + R"(": {"nblocks": 2}})");
    EXPECT_CONTAINS(e, file);
    EXPECT_CONTAINS(e, std::string("'") + key + "' = {\"nblocks\":2} is not supported");
    EXPECT_NO_THROW(LoraConfig::from_json(
        nlohmann::json::parse(std::string(R"({"peft_type": "LORA", ")") + key + R"(": null})"), file));
  }
  for (const char* init : {"pissa", "pissa_niter_4", "corda", "olora", "OLoRA", "loftq", "lora_ga"}) {
    std::string e = error(std::string(R"({"peft_type": "LORA", "init_lora_weights": ")") + init + "\"}");
    EXPECT_CONTAINS(e, file);
    EXPECT_CONTAINS(e, std::string("'init_lora_weights' = \"") + init + "\" is not supported");
    EXPECT_CONTAINS(e, "path_initial_model_for_weight_conversion");
  }
  // Initialisations that leave the base as it is load (the file's weights replace them).
  for (const char* init : {"true", "false", "\"gaussian\"", "\"eva\"", "\"orthogonal\"", "\"mica\""})
    EXPECT_NO_THROW(LoraConfig::from_json(
        nlohmann::json::parse(std::string(R"({"peft_type": "LORA", "init_lora_weights": )") + init + "}"), file))
        << init;
}

TEST(Lora, AdapterWeightsOfTheWrongKindAreClearErrors) {
  testing::TempDir tmp;
  auto base = [] { return models::from_pretrained(data("llama/llama_lm")); };
  auto trained = base();
  LoraConfig cfg;
  cfg.target_modules = {"q_proj"};
  models::apply_lora(*trained, cfg);
  {  // Only PEFT's pickle (safe_serialization=False): named, not read.
    const fs::path dir = tmp.path() / "bin";
    models::save_adapter(*trained, dir);
    fs::rename(dir / "adapter_model.safetensors", dir / "adapter_model.bin");
    auto m = base();
    std::string e = testing::error_of([&] { models::load_adapter(*m, dir); });
    EXPECT_CONTAINS(e, (dir / "adapter_model.safetensors").string() + " is missing; adapter_model.bin");
    EXPECT_CONTAINS(e, "safe_serialization=True");
  }
  {  // Integer values where a weight belongs.
    const fs::path dir = tmp.path() / "ints";
    models::save_adapter(*trained, dir);
    auto state = models::adapter_state(*trained);
    ASSERT_FALSE(state.empty());
    const std::string key = state[0].first;
    const Shape shape = state[0].second.shape();
    state[0].second = Tensor::from_vector(std::vector<int64_t>(static_cast<size_t>(numel(shape)), 1), shape);
    io::save_safetensors(dir / "adapter_model.safetensors", state, {{"format", "pt"}});
    auto m = base();
    std::string e = testing::error_of([&] { models::load_adapter(*m, dir); });
    EXPECT_CONTAINS(e, "adapter_model.safetensors: tensor '" + key + "' holds i64 values");
  }
}

}  // namespace
}  // namespace kiln
