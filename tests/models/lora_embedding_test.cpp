// LoRA on embedding tables (PEFT's lora.Embedding), exclude_modules as a
// regular expression, and an embedding table in modules_to_save. The logits
// and gradients of PEFT's adapters are checked by lora_test.cpp's golden
// cases (llama_lm_embed, gpt2_lm_wte, bert_seqcls_word_embeddings,
// llama_lm_exclude_regex, llama_lm_save_embed); this file checks merging,
// generation, the fresh branch and the errors.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/generation.h"
#include "kiln/models/lora.h"
#include "kiln/models/model.h"
#include "models/golden_inputs.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using models::LoraConfig;

fs::path data(const std::string& rel) { return fs::path(KILN_TEST_DATA_DIR) / rel; }

::testing::AssertionResult same(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << to_string(got.shape()) << " vs " << to_string(want.shape());
  return testing::all_close(got.to_vector<double>(), want.to_vector<double>(), rtol, atol);
}

std::map<std::string, Tensor> golden_of(const std::string& name) {
  return io::load_safetensors(data("lora/" + name + "/golden.safetensors"));
}

nn::Embedding& table(models::PreTrainedModel& model, const std::string& path) {
  for (auto& [p, m] : model.named_modules())
    if (p == path)
      if (auto* e = dynamic_cast<nn::Embedding*>(m)) return *e;
  throw Error("no embedding at " + path);
}

// The PEFT-made embedding adapters (tests/goldens/lora/<name>) and their base models.
const std::pair<const char*, const char*> kPeftCases[] = {
    {"llama_lm_embed", "llama/llama_lm"}, {"gpt2_lm_wte", "gpt2/gpt2_lm"}, {"bert_seqcls_word_embeddings", "bert/bert_seqcls"}};

// Base `base` in eval mode with adapter `name` loaded.
std::unique_ptr<models::PreTrainedModel> adapted(const std::string& name, const std::string& base) {
  auto model = models::from_pretrained(data(base));
  model->eval();
  models::load_adapter(*model, data("lora/" + name + "/adapter"));
  return model;
}

// Within PEFT's float32 rounding: the logits' largest value sets the absolute part.
double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

TEST(LoraEmbedding, PeftAdapterLogitsWithinOneMillionth) {
  for (const auto& [name, base] : kPeftCases) {
    auto golden = golden_of(name);
    auto model = adapted(name, base);
    const Tensor& want = golden.at("logits");
    EXPECT_TRUE(same(model->forward(testing::golden_inputs(golden)).logits, want, 1e-5, 1e-6 * max_abs(want))) << name;
  }
}

// PEFT's merge_and_unload folds scaling · (B·A)ᵀ into the table. GPT-2's
// head is that table, so merging changes the head as well: the merged model
// is not the adapted one, in PEFT as in kiln.
TEST(LoraEmbedding, MergeGivesPeftsMergedLogits) {
  for (const auto& [name, base] : kPeftCases) {
    auto golden = golden_of(name);
    auto model = adapted(name, base);
    models::merge_lora(*model);
    for (auto& [n, p] : model->named_parameters()) EXPECT_EQ(n.find("lora_"), std::string::npos) << n;
    const Tensor merged = model->forward(testing::golden_inputs(golden)).logits;
    const Tensor& want = golden.at("merged_logits");
    EXPECT_TRUE(same(merged, want, 1e-5, 1e-5 * max_abs(want))) << name;
    const bool tied = std::string(name) == "gpt2_lm_wte";
    EXPECT_EQ(static_cast<bool>(same(merged, golden.at("logits"), 1e-4, 1e-4)), !tied) << name;
  }
}

// PEFT's embedding branch: A [r, vocab] zero, B [hidden, r] N(0, 1), no
// dropout even when lora_dropout is set, and never part of all-linear.
TEST(LoraEmbedding, FreshBranchIsTheIdentityAndHasNoDropout) {
  auto golden = golden_of("llama_lm_embed");
  auto model = models::from_pretrained(data("llama/llama_lm"));
  model->eval();
  const Tensor before = model->forward(testing::golden_inputs(golden)).logits;
  LoraConfig cfg;
  cfg.r = 4;
  cfg.lora_dropout = 0.9;
  cfg.target_modules = {"embed_tokens"};
  models::apply_lora(*model, cfg);
  EXPECT_TRUE(same(model->forward(testing::golden_inputs(golden)).logits, before, 0, 0));
  nn::Embedding& e = table(*model, "model.embed_tokens");
  ASSERT_TRUE(e.lora());
  EXPECT_EQ(e.lora()->lora_embedding_A.shape(), (Shape{4, 99}));
  EXPECT_EQ(e.lora()->lora_embedding_B.shape(), (Shape{32, 4}));
  auto a = e.lora()->lora_embedding_A.to_vector<double>();
  EXPECT_TRUE(std::all_of(a.begin(), a.end(), [](double v) { return v == 0; }));
  auto b = e.lora()->lora_embedding_B.to_vector<double>();
  double sq = 0;
  for (double v : b) sq += v * v;
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(b.size())), 1.0, 0.25);  // N(0, 1)
  std::vector<std::string> trained;
  for (auto& [name, p] : model->named_parameters())
    if (p.requires_grad()) trained.push_back(name);
  EXPECT_EQ(trained, (std::vector<std::string>{"model.embed_tokens.lora_embedding_A", "model.embed_tokens.lora_embedding_B"}));
  {
    NoGradGuard no_grad;
    Generator gen(3);
    e.lora()->lora_embedding_A.assign(randn({4, 99}, gen));
  }
  const Tensor ids = golden.at("input_ids");
  const Tensor eval_rows = e.forward(ids);
  model->train();
  EXPECT_TRUE(same(e.forward(ids), eval_rows, 0, 0));

  auto all = models::from_pretrained(data("llama/llama_lm"));
  LoraConfig linear;
  linear.target_modules = {"all-linear"};
  models::apply_lora(*all, linear);
  EXPECT_FALSE(table(*all, "model.embed_tokens").lora());
}

// The decode step reads the branch too: cached generation equals
// recomputing every step, and equals the merged (untied) model's.
TEST(LoraEmbedding, GenerationUsesTheBranch) {
  auto adapted = models::from_pretrained(data("llama/llama_lm"));
  models::load_adapter(*adapted, data("lora/llama_lm_embed/adapter"));
  std::vector<std::vector<int64_t>> prompts{{5, 17, 42, 8}, {3}};
  models::GenerationConfig g;
  g.max_new_tokens = 6;
  g.eos_token_ids = {-1};
  g.use_cache = true;
  const auto cached = models::generate(*adapted, prompts, g);
  g.use_cache = false;
  EXPECT_EQ(models::generate(*adapted, prompts, g), cached);
  auto base = models::from_pretrained(data("llama/llama_lm"));
  EXPECT_NE(models::generate(*base, prompts, g), cached);
  models::merge_lora(*adapted);
  EXPECT_EQ(models::generate(*adapted, prompts, g), cached);
}

// What kiln trains on an embedding loads back to the same logits, with the
// tensors PEFT names (no ".weight" on the embedding branch), and with the
// table's own weight under its base_layer infix when embed_tokens is named,
// as PEFT's save_embedding_layers writes it.
TEST(LoraEmbedding, KilnAdapterRoundTripsWithPeftsKeys) {
  testing::TempDir tmp;
  auto golden = golden_of("llama_lm_embed");
  auto model = models::from_pretrained(data("llama/llama_lm"));
  model->eval();
  LoraConfig cfg;
  cfg.r = 3;
  cfg.target_modules = {"embed_tokens", "v_proj"};
  models::apply_lora(*model, cfg);
  {
    NoGradGuard no_grad;
    for (auto& [key, p] : models::adapter_state(*model)) p.assign(p + 0.1);
  }
  const Tensor want = model->forward(testing::golden_inputs(golden)).logits;
  models::save_adapter(*model, tmp.path());
  auto file = io::SafetensorsFile::open(tmp.path() / "adapter_model.safetensors");
  ASSERT_TRUE(file.find("base_model.model.model.embed_tokens.lora_embedding_A"));
  EXPECT_EQ(file.find("base_model.model.model.embed_tokens.lora_embedding_A")->shape, (Shape{3, 99}));
  EXPECT_EQ(file.find("base_model.model.model.embed_tokens.lora_embedding_B")->shape, (Shape{32, 3}));
  EXPECT_EQ(file.find("base_model.model.model.embed_tokens.base_layer.weight")->shape, (Shape{99, 32}));
  EXPECT_EQ(file.entries().size(), 2u + 4u + 1u);
  auto fresh = models::from_pretrained(data("llama/llama_lm"));
  fresh->eval();
  models::load_adapter(*fresh, tmp.path());
  EXPECT_TRUE(same(fresh->forward(testing::golden_inputs(golden)).logits, want, 0, 0));
}

TEST(LoraEmbedding, ExcludeModulesRegexRoundTrips) {
  testing::TempDir tmp;
  auto model = models::from_pretrained(data("llama/llama_lm"));
  LoraConfig cfg;
  cfg.target_modules = {"all-linear"};
  cfg.exclude_regex = R"(.*\.layers\.0\..*|.*_proj\.nothing)";
  models::apply_lora(*model, cfg);
  int adapted = 0;
  for (auto& [name, p] : model->named_parameters())
    if (name.find("lora_A") != std::string::npos) {
      EXPECT_NE(name.find("layers.1."), std::string::npos) << name;
      ++adapted;
    }
  EXPECT_EQ(adapted, 7);
  models::save_adapter(*model, tmp.path());
  EXPECT_EQ(read_json_file(tmp.path() / "adapter_config.json")["exclude_modules"], *cfg.exclude_regex);
  EXPECT_EQ(models::read_adapter_config(tmp.path()).exclude_regex, cfg.exclude_regex);

  auto other = models::from_pretrained(data("llama/llama_lm"));
  LoraConfig bad;
  bad.exclude_regex = "(unclosed";
  EXPECT_CONTAINS(testing::error_of([&] { models::apply_lora(*other, bad); }),
                  "exclude_modules is not a valid regular expression: invalid regex '(unclosed'");
}

TEST(LoraEmbedding, UnsupportedEmbeddingSetupsAreClearErrors) {
  for (const auto& [base, table_name] : {std::pair{"llama/qwen2_lm_tied", "embed_tokens"}, {"gpt2/gpt2_lm", "wte"}}) {
    auto m = models::from_pretrained(data(base));
    LoraConfig cfg;
    cfg.modules_to_save = {table_name};
    std::string e = testing::error_of([&] { models::apply_lora(*m, cfg); });
    EXPECT_CONTAINS(e, std::string("modules_to_save names '"));
    EXPECT_CONTAINS(e, "ties to its output head");
  }
  auto t5 = models::from_pretrained(data("t5/t5_gated_untied"));
  LoraConfig shared;
  shared.target_modules = {"shared"};
  EXPECT_CONTAINS(testing::error_of([&] { models::apply_lora(*t5, shared); }), "T5's shared embedding table");
  EXPECT_CONTAINS(testing::error_of([&] {
                    LoraConfig::from_json(nlohmann::json::parse(R"({"peft_type": "LORA", "ensure_weight_tying": true})"),
                                          "a/adapter_config.json");
                  }),
                  "a/adapter_config.json: 'ensure_weight_tying' = true is not supported");
}

// Hostile adapter files for an embedding branch: each error names the file and the tensor.
TEST(LoraEmbedding, BrokenEmbeddingAdaptersNameFileAndKey) {
  testing::TempDir tmp;
  const fs::path peft = data("lora/llama_lm_embed/adapter");
  const std::string a_key = "base_model.model.model.embed_tokens.lora_embedding_A";
  const std::string b_key = "base_model.model.model.embed_tokens.lora_embedding_B";
  auto variant = [&](const std::string& name, auto edit, nlohmann::json config) {
    const fs::path dir = tmp.path() / name;
    fs::create_directories(dir);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& [k, t] : io::load_safetensors(peft / "adapter_model.safetensors")) tensors.emplace_back(k, t);
    edit(tensors);
    io::save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
    io::write_json_file_atomic(dir / "adapter_config.json", config);
    auto m = models::from_pretrained(data("llama/llama_lm"));
    return testing::error_of([&] { models::load_adapter(*m, dir); });
  };
  const nlohmann::json config = read_json_file(peft / "adapter_config.json");
  using List = std::vector<std::pair<std::string, Tensor>>;
  const std::string file = "adapter_model.safetensors: tensor '";
  {
    std::string e = variant("missing_b", [&](List& l) { std::erase_if(l, [&](auto& kv) { return kv.first == b_key; }); },
                            config);
    EXPECT_CONTAINS(e, file + b_key + "' is missing");
  }
  {
    std::string e = variant("missing_a", [&](List& l) { std::erase_if(l, [&](auto& kv) { return kv.first == a_key; }); },
                            config);
    EXPECT_CONTAINS(e, file + a_key + "' is missing");
  }
  {  // A for a vocabulary of 98 rows.
    std::string e = variant("short_a", [&](List& l) {
      for (auto& [k, t] : l)
        if (k == a_key) t = zeros({4, 98});
    }, config);
    EXPECT_CONTAINS(e, file + a_key + "' has shape [4,98], the base model needs [4,99]");
  }
  {  // The config's rank is not the tensors'.
    nlohmann::json r2 = config;
    r2["r"] = 2;
    std::string e = variant("rank", [](List&) {}, r2);
    EXPECT_CONTAINS(e, file + a_key + "' has shape [4,99], the base model needs [2,99]");
  }
  {  // A table of another vocabulary (a resized one): not loaded, named.
    std::string e = variant("resized", [&](List& l) {
      for (auto& [k, t] : l)
        if (k.find("base_layer") != std::string::npos) t = zeros({120, 32});
    }, config);
    EXPECT_CONTAINS(e, file + "base_model.model.model.embed_tokens.base_layer.weight' has shape [120,32]");
    EXPECT_CONTAINS(e, "vocabulary of 120");
  }
}

// An adapter PEFT made after resize_token_embeddings carries the resized
// tables; loading it the CLI's way rebuilds the base with that vocabulary
// (its logits and loss are checked against PEFT's by lora_test.cpp's
// llama_lm_resized and gpt2_lm_resized cases), and the vocabulary follows
// through merging and saving.
TEST(LoraEmbedding, ResizedVocabularyFollowsThroughMergeAndSave) {
  testing::TempDir tmp;
  auto golden = golden_of("llama_lm_resized");
  const fs::path adapter = data("lora/llama_lm_resized/adapter");
  auto model = models::from_pretrained_with_adapter(data("llama/llama_lm"), adapter);
  model->eval();
  EXPECT_EQ(model->config().vocabulary_size(), 104);
  const Tensor adapted = model->forward(testing::golden_inputs(golden)).logits;
  EXPECT_EQ(adapted.shape(), (Shape{2, 7, 104}));
  models::GenerationConfig g;
  g.max_new_tokens = 3;
  g.eos_token_ids = {-1};
  EXPECT_EQ(models::generate(*model, {{5, 101, 103}}, g)[0].size(), 6u);
  models::merge_lora(*model);
  model->save_pretrained(tmp.path() / "merged");
  EXPECT_EQ(read_json_file(tmp.path() / "merged" / "config.json")["vocab_size"], 104);
  auto merged = models::from_pretrained(tmp.path() / "merged");
  merged->eval();
  EXPECT_TRUE(same(merged->forward(testing::golden_inputs(golden)).logits, adapted, 1e-5, 1e-5 * max_abs(adapted)));
}

TEST(LoraEmbedding, ResizedTablesThatDoNotFitAreClearErrors) {
  testing::TempDir tmp;
  const fs::path peft = data("lora/llama_lm_resized/adapter");
  auto variant = [&](const std::string& name, auto edit) {
    const fs::path dir = tmp.path() / name;
    fs::create_directories(dir);
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (auto& [k, t] : io::load_safetensors(peft / "adapter_model.safetensors"))
      if (edit(k, t)) tensors.emplace_back(k, t);
    io::save_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
    fs::copy_file(peft / "adapter_config.json", dir / "adapter_config.json");
    return testing::error_of([&] { models::from_pretrained_with_adapter(data("llama/llama_lm"), dir); });
  };
  {  // The untied head's table left out: the head cannot be resized.
    std::string e = variant("no_head", [](const std::string& k, Tensor&) { return k.find("lm_head") == std::string::npos; });
    EXPECT_CONTAINS(e, "no_head/adapter_model.safetensors: the adapter's tables have a vocabulary of 104");
    EXPECT_CONTAINS(e, "holds no tensor for 'lm_head.weight'");
  }
  for (int64_t rows : {105, 99}) {  // The two tables of different vocabularies (one of them the base's).
    std::string e = variant("mixed" + std::to_string(rows), [&](const std::string& k, Tensor& t) {
      if (k.find("lm_head") != std::string::npos) t = zeros({rows, 32});
      return true;
    });
    EXPECT_CONTAINS(e, "mixed" + std::to_string(rows) + "/adapter_model.safetensors: tensors '");
    EXPECT_CONTAINS(e, "hold vocabularies of different sizes");
  }
}

// modules_to_save naming an untied model's table trains it in full and saves
// it whole; an adapter holding a table of another vocabulary is refused.
TEST(LoraEmbedding, SavedEmbeddingTableTrainsInFullAndLoads) {
  auto golden = golden_of("llama_lm_save_embed");
  auto model = models::from_pretrained(data("llama/llama_lm"));
  LoraConfig cfg;
  cfg.modules_to_save = {"embed_tokens"};
  models::apply_lora(*model, cfg);
  bool saved = false;
  for (auto& [key, p] : models::adapter_state(*model))
    saved |= key == "base_model.model.model.embed_tokens.weight" && p.requires_grad();
  EXPECT_TRUE(saved);
  EXPECT_FALSE(table(*model, "model.embed_tokens").lora());  // no branch inside a saved module
}

}  // namespace
}  // namespace kiln
