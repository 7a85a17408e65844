// from_pretrained / save_pretrained: round trips, HF checkpoint layouts, and
// errors that name the offending tensor or field.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "kiln/io/json_file.h"
#include "kiln/io/safetensors.h"
#include "kiln/models/gpt2.h"
#include "kiln/models/llama.h"
#include "kiln/models/model.h"
#include "kiln/models/t5.h"
#include "models/tiny_t5.h"
#include "support/temp_dir.h"
#include "support/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

models::BertConfig tiny_config(const std::string& type = "bert") {
  models::BertConfig c = models::BertConfig::from_json({{"model_type", type}}, "test");
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.intermediate_size = 24;
  c.max_position_embeddings = 32;
  c.set_num_labels(3);
  c.extra["my_custom_field"] = {1, 2, 3};
  return c;
}

models::ModelInputs tiny_batch() {
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 0, 4, 8, 0, 0}, {2, 5});
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, {2, 5});
  in.labels = Tensor::from_vector(std::vector<int64_t>{2, 0}, {2});
  return in;
}

TEST(Pretrained, SaveThenLoadGivesIdenticalTensorsAndLogits) {
  for (const char* arch : {"BertForSequenceClassification", "RobertaForMaskedLM", "BertForQuestionAnswering",
                           "RobertaForTokenClassification"}) {
    SCOPED_TRACE(arch);
    TempDir dir;
    bool roberta = std::string(arch).rfind("Roberta", 0) == 0;
    auto model = models::create_model(arch, tiny_config(roberta ? "roberta" : "bert"), 7);
    model->eval();
    model->save_pretrained(dir.path());
    EXPECT_TRUE(fs::exists(dir.path() / "config.json"));
    EXPECT_TRUE(fs::exists(dir.path() / "model.safetensors"));
    auto loaded = models::from_pretrained(dir.path());
    loaded->eval();
    EXPECT_EQ(loaded->architecture(), arch);
    auto a = model->state_dict(), b = loaded->state_dict();
    ASSERT_EQ(a.size(), b.size());
    for (auto& [name, t] : a) EXPECT_EQ(t.to_vector<float>(), b.at(name).to_vector<float>()) << name;
    auto in = tiny_batch();
    in.labels = {};
    auto la = model->forward(in), lb = loaded->forward(in);
    Tensor xa = la.logits.defined() ? la.logits : la.start_logits, xb = lb.logits.defined() ? lb.logits : lb.start_logits;
    EXPECT_EQ(xa.to_vector<float>(), xb.to_vector<float>());
    // Unknown config fields survive the round trip.
    EXPECT_EQ(read_json_file(dir.path() / "config.json")["my_custom_field"], nlohmann::json({1, 2, 3}));
  }
}

// HF's RobertaForTokenClassification: roberta (no pooler), dropout, classifier.
TEST(Pretrained, RobertaTokenClassifierHasHuggingFacesNames) {
  auto model = models::create_model("RobertaForTokenClassification", tiny_config("roberta"), 7);
  auto names = model->state_dict();
  EXPECT_TRUE(names.count("roberta.embeddings.word_embeddings.weight"));
  EXPECT_TRUE(names.count("classifier.weight"));
  EXPECT_TRUE(names.count("classifier.bias"));
  for (auto& [name, t] : names) EXPECT_EQ(name.find("pooler"), std::string::npos) << name;
  auto in = tiny_batch();
  in.labels = Tensor::from_vector(std::vector<int64_t>{1, 0, 2, -100, 1, 0, 1, -100, -100, -100}, {2, 5});
  auto out = model->forward(in);
  EXPECT_EQ(out.logits.shape(), (Shape{2, 5, model->config().num_labels()}));
  EXPECT_TRUE(std::isfinite(out.loss.item()));
}

// HF's RobertaForQuestionAnswering: roberta (no pooler), qa_outputs [2, hidden]; the loss is the mean of the
// start and end cross-entropies.
TEST(Pretrained, RobertaQuestionAnsweringHasHuggingFacesNames) {
  auto model = models::create_model("RobertaForQuestionAnswering", tiny_config("roberta"), 7);
  model->eval();
  auto names = model->state_dict();
  EXPECT_TRUE(names.count("roberta.embeddings.word_embeddings.weight"));
  EXPECT_EQ(names.at("qa_outputs.weight").shape(), (Shape{2, 16}));  // tiny_config: hidden 16
  EXPECT_TRUE(names.count("qa_outputs.bias"));
  for (auto& [name, t] : names) EXPECT_EQ(name.find("pooler"), std::string::npos) << name;
  auto in = tiny_batch();
  in.labels = {};
  in.start_positions = Tensor::from_vector(std::vector<int64_t>{1, 0}, {2});
  in.end_positions = Tensor::from_vector(std::vector<int64_t>{3, 2}, {2});
  auto out = model->forward(in);
  ASSERT_EQ(out.start_logits.shape(), (Shape{2, 5}));
  auto s = out.start_logits.to_vector<float>(), e = out.end_logits.to_vector<float>();
  auto nll = [](const std::vector<float>& v, size_t row, size_t k) {
    double z = 0;
    for (size_t j = 0; j < 5; ++j) z += std::exp(static_cast<double>(v[row * 5 + j]));
    return std::log(z) - v[row * 5 + k];
  };
  const double expected = ((nll(s, 0, 1) + nll(s, 1, 0)) / 2 + (nll(e, 0, 3) + nll(e, 1, 2)) / 2) / 2;
  EXPECT_NEAR(out.loss.item(), expected, 1e-5);
}

TEST(Pretrained, TiedDecoderIsSavedOnceAsHuggingFaceDoes) {
  TempDir dir;
  auto model = models::create_model("BertForMaskedLM", tiny_config(), 1);
  model->save_pretrained(dir.path());
  auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
  EXPECT_NE(file.find("bert.embeddings.word_embeddings.weight"), nullptr);
  EXPECT_NE(file.find("cls.predictions.bias"), nullptr);
  EXPECT_EQ(file.find("cls.predictions.decoder.weight"), nullptr);
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

// Rewrites DIR/model.safetensors through `edit`.
void edit_weights(const fs::path& dir, const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  auto tensors = io::load_safetensors(dir / "model.safetensors");
  edit(tensors);
  std::vector<std::pair<std::string, Tensor>> list(tensors.begin(), tensors.end());
  io::save_safetensors(dir / "model.safetensors", list);
}

std::string load_error(const fs::path& dir) {
  try {
    models::from_pretrained(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Pretrained, MissingExtraOrMisShapedTensorsAreNamed) {
  TempDir dir;
  models::create_model("BertForSequenceClassification", tiny_config(), 3)->save_pretrained(dir.path());
  const std::string key = "bert.encoder.layer.1.attention.self.key.weight";

  edit_weights(dir.path(), [&](auto& t) { t.erase(key); });
  std::string e = load_error(dir.path());
  EXPECT_NE(e.find("missing tensor '" + key + "' [16,16]"), std::string::npos) << e;

  models::create_model("BertForSequenceClassification", tiny_config(), 3)->save_pretrained(dir.path());
  edit_weights(dir.path(), [&](auto& t) { t[key] = zeros({16, 8}); });
  e = load_error(dir.path());
  EXPECT_NE(e.find(key + ": checkpoint [16,8], model [16,16]"), std::string::npos) << e;

  models::create_model("BertForSequenceClassification", tiny_config(), 3)->save_pretrained(dir.path());
  edit_weights(dir.path(), [&](auto& t) { t["bert.encoder.layer.0.extra.weight"] = zeros({2}); });
  e = load_error(dir.path());
  EXPECT_NE(e.find("unexpected tensor 'bert.encoder.layer.0.extra.weight'"), std::string::npos) << e;

  // A config.json of another width: every tensor differs; the first 20 are listed.
  models::BertConfig wider = tiny_config();
  wider.hidden_size = 32;
  models::create_model("BertForSequenceClassification", wider, 3)->save_pretrained(dir.path());
  models::create_model("BertForSequenceClassification", tiny_config(), 3)->save_pretrained(dir.path() / "small");
  fs::copy_file(dir.path() / "small" / "config.json", dir.path() / "config.json", fs::copy_options::overwrite_existing);
  e = load_error(dir.path());
  EXPECT_EQ(std::count(e.begin(), e.end(), '\n'), 23) << e;  // the file, 20 tensors, the rest, the hint
  EXPECT_CONTAINS(e, " more (does config.json describe this checkpoint?)");
}

TEST(Pretrained, HeadModelFromBaseCheckpointInitialisesTheNewHead) {
  TempDir dir;
  auto base = models::create_model("BertModel", tiny_config(), 5);
  base->save_pretrained(dir.path());  // keys without the "bert." prefix
  models::LoadOptions opts;
  opts.architecture = "BertForSequenceClassification";
  opts.num_labels = 4;
  auto model = models::from_pretrained(dir.path(), opts);
  auto sd = model->state_dict();
  EXPECT_EQ(sd.at("classifier.weight").shape(), (Shape{4, 16}));
  EXPECT_EQ(sd.at("bert.embeddings.word_embeddings.weight").to_vector<float>(),
            base->state_dict().at("embeddings.word_embeddings.weight").to_vector<float>());
}

// HF's BertForMaskedLM has no pooler: a classifier made from its checkpoint
// initialises one (as transformers does), where any other missing backbone
// tensor is an error.
TEST(Pretrained, ClassifierFromMaskedLmCheckpointInitialisesThePooler) {
  TempDir dir;
  auto mlm = models::create_model("BertForMaskedLM", tiny_config(), 5);
  mlm->save_pretrained(dir.path());
  for (const auto& [name, t] : mlm->named_parameters()) EXPECT_EQ(name.find("pooler"), std::string::npos) << name;
  models::LoadOptions opts;
  opts.architecture = "BertForSequenceClassification";
  auto model = models::from_pretrained(dir.path(), opts);
  EXPECT_EQ(model->state_dict().at("bert.pooler.dense.weight").shape(), (Shape{16, 16}));
}

// DistilBERT: config.json under DistilBertConfig's names both ways, HF's
// parameter names, vocab_projector tied and saved once (and accepted when a
// checkpoint keeps it), no token types, a new head on a base checkpoint, and
// config errors naming DistilBERT's keys.
TEST(Pretrained, DistilBertNamesConfigAndCheckpoints) {
  TempDir dir, base_dir;
  auto model = models::create_model("DistilBertForMaskedLM", tiny_config("distilbert"), 1);
  model->eval();
  model->save_pretrained(dir.path());
  auto j = read_json_file(dir.path() / "config.json");
  EXPECT_EQ(j["dim"], 16);
  EXPECT_EQ(j["n_layers"], 2);
  EXPECT_EQ(j["n_heads"], 2);
  EXPECT_EQ(j["hidden_dim"], 24);
  EXPECT_EQ(j["activation"], "gelu");
  EXPECT_EQ(j["seq_classif_dropout"], 0.2);
  EXPECT_EQ(j["architectures"][0], "DistilBertForMaskedLM");
  EXPECT_EQ(j["my_custom_field"], nlohmann::json({1, 2, 3}));
  for (const char* bert_name : {"hidden_size", "num_hidden_layers", "type_vocab_size", "hidden_act", "layer_norm_eps"})
    EXPECT_FALSE(j.contains(bert_name)) << bert_name;
  {
    auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
    EXPECT_NE(file.find("distilbert.transformer.layer.1.attention.q_lin.weight"), nullptr);
    EXPECT_NE(file.find("distilbert.transformer.layer.0.sa_layer_norm.bias"), nullptr);
    EXPECT_NE(file.find("distilbert.transformer.layer.0.ffn.lin2.bias"), nullptr);
    EXPECT_NE(file.find("vocab_layer_norm.weight"), nullptr);
    EXPECT_NE(file.find("vocab_projector.bias"), nullptr);
    EXPECT_EQ(file.find("vocab_projector.weight"), nullptr);
    EXPECT_EQ(file.find("distilbert.embeddings.token_type_embeddings.weight"), nullptr);
  }
  models::ModelInputs in = tiny_batch();
  in.labels = Tensor();
  Tensor logits = model->forward(in).logits;
  // A checkpoint that kept the tied weight (as older HF saves did) loads, to the same model.
  edit_weights(dir.path(), [](std::map<std::string, Tensor>& t) {
    t["vocab_projector.weight"] = t.at("distilbert.embeddings.word_embeddings.weight");
  });
  auto again = models::from_pretrained(dir.path());
  again->eval();
  EXPECT_EQ(again->forward(in).logits.to_vector<float>(), logits.to_vector<float>());
  EXPECT_FALSE(again->tokenizer_gives_token_types());
  in.token_type_ids = zeros_like(in.input_ids);
  EXPECT_CONTAINS(testing::error_of([&] { again->forward(in); }), "takes no token_type_ids");

  auto base = models::create_model("DistilBertModel", tiny_config("distilbert"), 5);
  base->save_pretrained(base_dir.path());
  models::LoadOptions opts;
  opts.architecture = "DistilBertForSequenceClassification";
  opts.num_labels = 4;
  auto cls = models::from_pretrained(base_dir.path(), opts);
  auto sd = cls->state_dict();
  EXPECT_EQ(sd.at("pre_classifier.weight").shape(), (Shape{16, 16}));
  EXPECT_EQ(sd.at("classifier.weight").shape(), (Shape{4, 16}));
  EXPECT_EQ(sd.at("distilbert.embeddings.word_embeddings.weight").to_vector<float>(),
            base->state_dict().at("embeddings.word_embeddings.weight").to_vector<float>());

  auto config_error = [&](nlohmann::json c) {
    io::write_json_file_atomic(dir.path() / "config.json", c);
    return load_error(dir.path());
  };
  EXPECT_CONTAINS(config_error({{"model_type", "distilbert"}, {"dim", 30}, {"n_heads", 4}}),
                  "config.json: dim 30 is not a multiple of n_heads 4");
  EXPECT_CONTAINS(config_error({{"model_type", "distilbert"}, {"n_layers", "six"}}),
                  "config.json: 'n_layers' must be an integer, got string \"six\"");
  EXPECT_CONTAINS(config_error({{"model_type", "distilbert"}, {"sinusoidal_pos_embds", true}}),
                  "config.json: 'sinusoidal_pos_embds' true is not supported");
  EXPECT_CONTAINS(config_error({{"model_type", "distilbert"}, {"seq_classif_dropout", 1.5}}),
                  "'seq_classif_dropout' must be in [0, 1), got 1.5");
  EXPECT_CONTAINS(config_error({{"model_type", "distilbert"}, {"activation", "swishy"}}), "config.json: activation: ");
}

// A classifier fine-tuned again with another number of labels: an error
// that names ignore_mismatched_sizes, which then initialises the head anew
// and keeps the backbone (HF's ignore_mismatched_sizes).
TEST(Pretrained, IgnoreMismatchedSizesInitialisesTheResizedHead) {
  TempDir dir;
  auto three = models::create_model("BertForSequenceClassification", tiny_config(), 5);  // 3 labels
  three->save_pretrained(dir.path());
  models::LoadOptions opts;
  opts.num_labels = 2;
  const std::string e = testing::error_of([&] { models::from_pretrained(dir.path(), opts); });
  EXPECT_CONTAINS(e, "classifier.weight: checkpoint [3,16], model [2,16]");
  EXPECT_CONTAINS(e, "kiln train's --ignore_mismatched_sizes");
  opts.ignore_mismatched_sizes = true;
  auto two = models::from_pretrained(dir.path(), opts);
  auto sd = two->state_dict();
  EXPECT_EQ(sd.at("classifier.weight").shape(), (Shape{2, 16}));
  EXPECT_EQ(sd.at("classifier.bias").to_vector<float>(), std::vector<float>(2, 0.0f));  // as HF initialises a bias
  EXPECT_EQ(sd.at("bert.encoder.layer.1.output.dense.weight").to_vector<float>(),
            three->state_dict().at("bert.encoder.layer.1.output.dense.weight").to_vector<float>());
}

TEST(Pretrained, LegacyGammaBetaNamesLoad) {
  TempDir dir;
  auto model = models::create_model("BertForSequenceClassification", tiny_config(), 3);
  model->save_pretrained(dir.path());
  edit_weights(dir.path(), [&](auto& t) {
    auto w = t.at("bert.embeddings.LayerNorm.weight");
    t.erase("bert.embeddings.LayerNorm.weight");
    t["bert.embeddings.LayerNorm.gamma"] = w;
  });
  EXPECT_NO_THROW(models::from_pretrained(dir.path()));
}

// Values whose math would give NaN or an out-of-range lookup later: a
// negative LayerNorm epsilon, T5 buckets whose log range is empty or
// negative, a decoder start id outside the vocabulary.
TEST(Pretrained, ConfigValuesThatBreakTheMathAreErrors) {
  auto error = [](auto parse) { return testing::error_of(parse); };
  EXPECT_CONTAINS(error([] { models::BertConfig::from_json({{"layer_norm_eps", -1}}, "b.json"); }),
                  "b.json: 'layer_norm_eps' must be >= 0, got -1");
  EXPECT_CONTAINS(error([] { models::GPT2Config::from_json({{"layer_norm_epsilon", -1e-5}}, "g.json"); }),
                  "g.json: 'layer_norm_epsilon' must be >= 0");
  EXPECT_CONTAINS(error([] { models::T5Config::from_json({{"relative_attention_max_distance", 0}}, "t.json"); }),
                  "t.json: 'relative_attention_max_distance' must be greater than relative_attention_num_buckets / 2 "
                  "(16), got 0");
  EXPECT_CONTAINS(error([] { models::T5Config::from_json({{"decoder_start_token_id", -5}}, "t.json"); }),
                  "t.json: decoder_start_token_id -5 out of range [0, 32128)");
  EXPECT_CONTAINS(error([] { models::T5Config::from_json({{"layer_norm_epsilon", -1}}, "t.json"); }),
                  "'layer_norm_epsilon' must be >= 0");
  EXPECT_NO_THROW(models::T5Config::from_json(nlohmann::json::object(), "t.json"));
}

TEST(Pretrained, BadConfigsAreClearErrors) {
  TempDir dir;
  models::create_model("BertForSequenceClassification", tiny_config(), 3)->save_pretrained(dir.path());
  auto cfg = read_json_file(dir.path() / "config.json");
  cfg["hidden_size"] = "big";
  io::write_json_file_atomic(dir.path() / "config.json", cfg);
  EXPECT_NE(load_error(dir.path()).find("'hidden_size' must be an integer, got string \"big\""), std::string::npos)
      << load_error(dir.path());
  cfg["hidden_size"] = 15;  // not a multiple of 2 heads
  io::write_json_file_atomic(dir.path() / "config.json", cfg);
  EXPECT_NE(load_error(dir.path()).find("hidden_size 15 is not a multiple of num_attention_heads 2"), std::string::npos);
  cfg["hidden_size"] = 16;
  cfg["architectures"] = {"BertForNextSentencePrediction"};
  io::write_json_file_atomic(dir.path() / "config.json", cfg);
  EXPECT_NE(load_error(dir.path()).find("unsupported architecture 'BertForNextSentencePrediction'"), std::string::npos);
  cfg["architectures"] = {"BertForSequenceClassification"};
  cfg["model_type"] = "falcon";
  io::write_json_file_atomic(dir.path() / "config.json", cfg);
  EXPECT_CONTAINS(load_error(dir.path()), "model_type 'falcon' is not supported (supported: bert, roberta, distilbert, "
                                          "gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, phi3, t5, deberta-v2)");
  std::ofstream(dir.path() / "config.json") << "{\"model_type\": ";
  EXPECT_NE(load_error(dir.path()).find("config.json"), std::string::npos);
}

// gpt2-tiny with 60 words and 16 positions, in eval mode.
std::unique_ptr<models::PreTrainedModel> tiny_gpt2() {
  auto c = models::preset_config("gpt2-tiny");
  auto& g = dynamic_cast<models::GPT2Config&>(*c);
  g.vocab_size = 60;
  g.n_positions = 16;
  auto model = models::create_model("GPT2LMHeadModel", *c, 4);
  model->eval();
  return model;
}

TEST(Pretrained, Gpt2RoundTripAndTiedLmHead) {
  TempDir dir;
  auto model = tiny_gpt2();
  model->save_pretrained(dir.path());
  auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
  EXPECT_NE(file.find("transformer.wte.weight"), nullptr);
  EXPECT_EQ(file.find("lm_head.weight"), nullptr);  // tied, saved once
  EXPECT_EQ(file.find("transformer.h.0.attn.c_attn.weight")->shape, (Shape{128, 384}));  // Conv1D [in, out]
  auto loaded = models::from_pretrained(dir.path());
  loaded->eval();
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 1}, {2, 3});
  EXPECT_EQ(model->forward(in).logits.to_vector<float>(), loaded->forward(in).logits.to_vector<float>());
  EXPECT_EQ(read_json_file(dir.path() / "config.json")["model_type"], "gpt2");
}

// Llama under HF's names: an untied lm_head saved, a tied one not (and a
// checkpoint that kept the tied copy still loads); grouped-query shapes;
// LlamaConfig's keys, eos lists and the errors that name them.
TEST(Pretrained, LlamaNamesConfigAndCheckpoints) {
  TempDir dir, tied_dir;
  auto c = models::preset_config("llama-tiny");
  auto& l = dynamic_cast<models::LlamaConfig&>(*c);
  l.vocab_size = 60;
  l.hidden_size = 32;
  l.intermediate_size = 40;
  l.eos_token_id = {2, 7};
  auto model = models::create_model("LlamaForCausalLM", *c, 4);
  model->eval();
  model->save_pretrained(dir.path());
  auto j = read_json_file(dir.path() / "config.json");
  EXPECT_EQ(j["num_key_value_heads"], 2);
  EXPECT_EQ(j["eos_token_id"], nlohmann::json({2, 7}));
  EXPECT_EQ(j["rope_theta"], 10000.0);
  EXPECT_EQ(j["hidden_act"], "silu");
  {
    auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
    EXPECT_EQ(file.find("model.layers.0.self_attn.k_proj.weight")->shape, (Shape{16, 32}));  // 2 heads of 8
    EXPECT_EQ(file.find("model.layers.0.self_attn.q_proj.weight")->shape, (Shape{32, 32}));
    EXPECT_EQ(file.find("model.layers.1.mlp.down_proj.weight")->shape, (Shape{32, 40}));
    EXPECT_EQ(file.find("model.layers.0.self_attn.q_proj.bias"), nullptr);
    EXPECT_NE(file.find("lm_head.weight"), nullptr);
    EXPECT_NE(file.find("model.norm.weight"), nullptr);
  }
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 1}, {2, 3});
  auto loaded = models::from_pretrained(dir.path());
  loaded->eval();
  EXPECT_EQ(model->forward(in).logits.to_vector<float>(), loaded->forward(in).logits.to_vector<float>());
  in.token_type_ids = zeros_like(in.input_ids);
  EXPECT_CONTAINS(testing::error_of([&] { loaded->forward(in); }), "LlamaForCausalLM takes no token_type_ids");
  in.token_type_ids = Tensor();
  {
    // The rotary table grows past its first 64 rows when a longer sequence comes: a
    // prefix's logits do not change.
    std::vector<int64_t> ids(70);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7) % 60);
    models::ModelInputs shorter, longer;
    shorter.input_ids = Tensor::from_vector(std::vector<int64_t>(ids.begin(), ids.begin() + 10), {1, 10});
    longer.input_ids = Tensor::from_vector(ids, {1, 70});
    std::vector<float> a = loaded->forward(shorter).logits.to_vector<float>();
    std::vector<float> b = loaded->forward(longer).logits.to_vector<float>();
    b.resize(a.size());
    EXPECT_TRUE(testing::all_close(std::vector<double>(a.begin(), a.end()), std::vector<double>(b.begin(), b.end()),
                                   1e-5, 1e-6));
  }

  l.tie_word_embeddings = true;
  auto tied = models::create_model("LlamaForCausalLM", *c, 4);
  tied->eval();
  tied->save_pretrained(tied_dir.path());
  EXPECT_EQ(io::SafetensorsFile::open(tied_dir.path() / "model.safetensors").find("lm_head.weight"), nullptr);
  Tensor logits = tied->forward(in).logits;
  edit_weights(tied_dir.path(), [](std::map<std::string, Tensor>& t) {
    t["lm_head.weight"] = t.at("model.embed_tokens.weight");  // the copy some saves keep
  });
  auto again = models::from_pretrained(tied_dir.path());
  again->eval();
  EXPECT_EQ(again->forward(in).logits.to_vector<float>(), logits.to_vector<float>());

  auto config_error = [&](nlohmann::json changes) {
    nlohmann::json cj = read_json_file(dir.path() / "config.json");
    cj.update(changes);
    return testing::error_of([&] { models::LlamaConfig::from_json(cj, "m/config.json"); });
  };
  EXPECT_CONTAINS(config_error({{"num_key_value_heads", 3}}),
                  "m/config.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  EXPECT_CONTAINS(config_error({{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}}),
                  "m/config.json: 'rope_scaling': rope_type 'llama3' needs 'low_freq_factor'");
  EXPECT_CONTAINS(config_error({{"rope_scaling", {{"rope_type", "ntk"}, {"factor", 8.0}}}}),
                  "m/config.json: 'rope_scaling': rope_type 'ntk' is not supported");
  EXPECT_CONTAINS(config_error({{"rope_scaling", {{"type", "linear"}, {"factor", 2.0}, {"low_freq_factor", 1}}}}),
                  "m/config.json: 'rope_scaling': 'low_freq_factor' is not a parameter of rope_type 'linear'");
  EXPECT_CONTAINS(config_error({{"rope_scaling", {{"rope_type", "dynamic"}}}}), "rope_type 'dynamic' needs 'factor'");
  EXPECT_CONTAINS(config_error({{"rope_parameters", {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}}}),
                  "m/config.json: 'rope_parameters': partial_rotary_factor 0.5 is not supported");
  // A top-level partial_rotary_factor (Phi-4-mini's) reaches HF's rotary embedding too.
  EXPECT_CONTAINS(config_error({{"partial_rotary_factor", 0.75}}),
                  "m/config.json: partial_rotary_factor 0.75 is not supported");
  EXPECT_EQ(config_error({{"partial_rotary_factor", 1.0}}), "");
  EXPECT_EQ(config_error({{"rope_scaling", {{"rope_type", "default"}}}}), "");
  EXPECT_CONTAINS(config_error({{"eos_token_id", {2, "x"}}}),
                  "m/config.json: 'eos_token_id' must be an id or a list of ids, got [2,\"x\"]");
  EXPECT_CONTAINS(config_error({{"hidden_act", "swiglu"}}), "m/config.json: hidden_act: unsupported activation 'swiglu'");
  EXPECT_CONTAINS(config_error({{"head_dim", 7}}), "the head size 7 must be even");
  EXPECT_CONTAINS(config_error({{"rope_theta", 0}}), "'rope_theta' must be positive, got 0");
}

// Mistral and Qwen2 are Llama's layers under their own configs: each reads
// and writes its own keys and defaults, Qwen2 has biases on q, k and v only,
// and a query past the sliding window does not see the keys before it.
TEST(Pretrained, MistralAndQwen2AreLlamasUnderTheirOwnConfigs) {
  TempDir dir;
  auto qwen = models::LlamaConfig::from_json(
      {{"model_type", "qwen2"}, {"vocab_size", 60}, {"hidden_size", 32}, {"intermediate_size", 40},
       {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}},
      "q.json");
  EXPECT_EQ(qwen.max_position_embeddings, 32768);  // Qwen2Config's default
  EXPECT_FALSE(qwen.bos_token_id.has_value());
  auto model = models::create_model("Qwen2ForCausalLM", qwen, 3);
  model->save_pretrained(dir.path());
  auto j = read_json_file(dir.path() / "config.json");
  EXPECT_EQ(j["use_sliding_window"], false);
  EXPECT_FALSE(j.contains("attention_bias"));
  EXPECT_FALSE(j.contains("pretraining_tp"));
  auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
  EXPECT_NE(file.find("model.layers.0.self_attn.k_proj.bias"), nullptr);
  EXPECT_EQ(file.find("model.layers.0.self_attn.o_proj.bias"), nullptr);
  EXPECT_EQ(file.find("model.layers.0.mlp.up_proj.bias"), nullptr);
  EXPECT_EQ(models::from_pretrained(dir.path())->architecture(), "Qwen2ForCausalLM");
  EXPECT_CONTAINS(testing::error_of([&] { models::create_model("LlamaForCausalLM", qwen, 3); }),
                  "architecture LlamaForCausalLM does not match model_type 'qwen2'");

  auto mistral = models::LlamaConfig::from_json(
      {{"model_type", "mistral"}, {"vocab_size", 60}, {"hidden_size", 32}, {"intermediate_size", 40},
       {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"sliding_window", 4}},
      "m.json");
  EXPECT_EQ(models::LlamaConfig::defaults("mistral").kv_heads(), 8);  // MistralConfig's defaults
  EXPECT_EQ(models::LlamaConfig::defaults("mistral").intermediate_size, 14336);
  EXPECT_EQ(mistral.to_json()["sliding_window"], 4);
  auto m = models::create_model("MistralForCausalLM", mistral, 3);
  m->eval();
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 8}, {1, 6});
  // The last position's window (4 keys) leaves out the first two tokens: changing them changes only earlier rows.
  std::vector<float> a = m->forward(in).logits.to_vector<float>();
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{6, 2, 9, 11, 3, 8}, {1, 6});
  std::vector<float> b = m->forward(in).logits.to_vector<float>();
  EXPECT_NE(std::vector<float>(a.begin() + 4 * 60, a.begin() + 5 * 60), std::vector<float>(b.begin() + 4 * 60, b.begin() + 5 * 60));
  EXPECT_EQ(std::vector<float>(a.begin() + 5 * 60, a.end()), std::vector<float>(b.begin() + 5 * 60, b.end()));
  EXPECT_CONTAINS(testing::error_of([&] {
                    models::LlamaConfig::from_json({{"model_type", "mistral"}, {"sliding_window", 0}}, "m.json");
                  }),
                  "m.json: 'sliding_window' must be positive, got 0");
}

// rope_scaling (transformers 4's form) and rope_parameters (transformers 5's)
// are each written back in the form read; the newer families' own keys.
TEST(Pretrained, RopeScalingAndNewerFamiliesRoundTrip) {
  const nlohmann::json llama3 = {{"factor", 32.0}, {"high_freq_factor", 4.0}, {"low_freq_factor", 1.0},
                                 {"original_max_position_embeddings", 8192}, {"rope_type", "llama3"}};
  auto legacy = models::LlamaConfig::from_json({{"model_type", "llama"}, {"rope_theta", 500000.0}, {"rope_scaling", llama3},
                                                {"head_dim", 64}, {"tie_word_embeddings", true}},
                                               "l.json");
  EXPECT_EQ(legacy.rope.type, "llama3");
  EXPECT_EQ(legacy.head_size(), 64);
  auto j = legacy.to_json();
  EXPECT_EQ(j["rope_scaling"], llama3);
  EXPECT_EQ(j["rope_theta"], 500000.0);
  EXPECT_FALSE(j.contains("rope_parameters"));
  nlohmann::json params = llama3;
  params["rope_theta"] = 500000.0;
  auto v5 = models::LlamaConfig::from_json({{"model_type", "llama"}, {"rope_parameters", params}}, "l.json");
  EXPECT_EQ(v5.rope.theta, 500000.0);
  j = v5.to_json();
  EXPECT_EQ(j["rope_parameters"], params);
  EXPECT_FALSE(j.contains("rope_scaling"));
  // llama3: high frequencies kept, low ones divided by the factor.
  auto inv = legacy.rope.inv_freq(64, 131072, 10);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[31], 1.0 / std::pow(500000.0, 62.0 / 64) / 32, 1e-12);

  auto gemma2 = models::LlamaConfig::from_json({{"model_type", "gemma2"}}, "g.json");
  EXPECT_EQ(gemma2.head_size(), 256);  // Gemma2Config's defaults
  EXPECT_EQ(gemma2.kv_heads(), 4);
  EXPECT_TRUE(gemma2.tie_word_embeddings);
  EXPECT_EQ(*gemma2.layer_window(0), 4096);
  EXPECT_FALSE(gemma2.layer_window(1).has_value());
  j = gemma2.to_json();
  EXPECT_EQ(j["hidden_activation"], "gelu_pytorch_tanh");
  EXPECT_FALSE(j.contains("hidden_act"));
  EXPECT_EQ(j["layer_types"].size(), 26u);
  EXPECT_EQ(j["final_logit_softcapping"], 30.0);
  EXPECT_EQ(models::LlamaConfig::from_json({{"model_type", "gemma"}, {"hidden_act", "gelu"}}, "g.json").hidden_act,
            "gelu_pytorch_tanh");  // GemmaConfig's reading of the legacy value
  auto qwen3 = models::LlamaConfig::from_json({{"model_type", "qwen3"}, {"use_sliding_window", true},
                                               {"sliding_window", 8}, {"max_window_layers", 30}},
                                              "q.json");
  EXPECT_EQ(qwen3.head_size(), 128);
  EXPECT_FALSE(qwen3.layer_window(29).has_value());
  EXPECT_EQ(*qwen3.layer_window(30), 8);
  auto error = [](nlohmann::json cj) {
    return testing::error_of([&] { models::LlamaConfig::from_json(cj, "c.json"); });
  };
  EXPECT_CONTAINS(error({{"model_type", "gemma2"}, {"num_hidden_layers", 2}, {"layer_types", {"full_attention"}}}),
                  "c.json: 'layer_types' has 1 entries for 2 layers");
  EXPECT_CONTAINS(error({{"model_type", "gemma2"}, {"layer_types", {"chunked_attention"}}}),
                  "c.json: 'layer_types' entries must be \"full_attention\" or \"sliding_attention\"");
  EXPECT_CONTAINS(error({{"model_type", "gemma"}, {"use_bidirectional_attention", true}}),
                  "c.json: 'use_bidirectional_attention' true is not supported");
  EXPECT_CONTAINS(error({{"model_type", "gemma2"}, {"attn_logit_softcapping", -1.0}}),
                  "'attn_logit_softcapping' must be positive or null, got -1");
  EXPECT_CONTAINS(error({{"model_type", "llama"}, {"rope_parameters", {{"full_attention", {{"rope_type", "default"}}}}}}),
                  "c.json: 'rope_parameters' per layer type is not supported");
  EXPECT_CONTAINS(error({{"model_type", "llama"}, {"head_dim", 2},
                         {"rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}}}),
                  "c.json: 'rope_scaling': rope_type 'dynamic' needs head_dim > 2, got 2");
  EXPECT_CONTAINS(error({{"model_type", "llama"}, {"rope_scaling", {{"rope_type", "linear"}, {"factor", 0.0}}}}),
                  "c.json: 'rope_scaling': 'factor' must be positive, got 0");
  EXPECT_CONTAINS(error({{"model_type", "phi3"}, {"hidden_size", 64}, {"num_attention_heads", 4},
                         {"rope_scaling", {{"type", "su"}, {"short_factor", {1.0, 1.0}}, {"long_factor", {1.0, 2.0}}}}}),
                  "c.json: 'rope_scaling': short_factor and long_factor must have head_dim / 2 = 8 entries, got 2 and 2");
  EXPECT_CONTAINS(error({{"model_type", "llama"},
                         {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 4.0},
                                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}}}),
                  "llama3 needs 0 < low_freq_factor < high_freq_factor, got 4 and 4");
}

// The newer families ship as bf16: a bf16 checkpoint loads as the float32
// values of its bf16 numbers (a Gemma 2 and a Llama 3.2-shaped golden).
TEST(Pretrained, Bf16CheckpointsLoadAsTheirValues) {
  for (const char* name : {"gemma/gemma2_lm", "llama3/llama3_lm_tied", "phi3/phi3_lm"}) {
    SCOPED_TRACE(name);
    TempDir bf16, rounded;
    for (const char* f : {"config.json", "model.safetensors"}) {
      fs::copy_file(fs::path(KILN_TEST_DATA_DIR) / name / f, bf16.path() / f);
      fs::copy_file(fs::path(KILN_TEST_DATA_DIR) / name / f, rounded.path() / f);
    }
    edit_weights(bf16.path(), [](auto& t) {
      for (auto& [k, v] : t) v = cast(v, DType::bf16);
    });
    edit_weights(rounded.path(), [](auto& t) {
      for (auto& [k, v] : t) v = cast(cast(v, DType::bf16), DType::f32);
    });
    EXPECT_EQ(io::SafetensorsFile::open(bf16.path() / "model.safetensors").entries().at(0).dtype, "BF16");
    auto a = models::from_pretrained(bf16.path()), b = models::from_pretrained(rounded.path());
    a->eval(), b->eval();
    models::ModelInputs in;
    in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 8}, {2, 3});
    EXPECT_EQ(a->forward(in).logits.to_vector<float>(), b->forward(in).logits.to_vector<float>());
  }
}

// kiln init's presets of the newer families build, run and save configs that read back.
TEST(Pretrained, NewerFamilyPresetsBuildAndRoundTrip) {
  for (const char* name : {"llama3-tiny", "qwen3-tiny", "mistral-tiny", "gemma-tiny", "gemma2-tiny", "phi3-tiny"}) {
    SCOPED_TRACE(name);
    auto c = models::preset_config(name);
    ASSERT_NE(c, nullptr);
    dynamic_cast<models::LlamaConfig&>(*c).vocab_size = 50;
    auto model = models::create_model(c->architectures.at(0), *c, 1);
    models::ModelInputs in;
    in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9, 11, 3, 1}, {2, 3});
    EXPECT_EQ(model->forward(in).logits.shape(), (Shape{2, 3, 50}));
    EXPECT_EQ(models::config_from_json(c->to_json(), name)->to_json(), c->to_json());
  }
  EXPECT_NE(models::preset_names().find("gemma2-tiny"), std::string::npos);
}

// token_type_ids in GPT-2 are looked up in the word embeddings and added, as
// HF's GPT2Model does: the same as adding those rows to the positions'.
TEST(Pretrained, Gpt2TokenTypeIdsAddTheirWordEmbeddings) {
  auto model = tiny_gpt2();
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7, 9}, {1, 3});
  const std::vector<float> plain = model->forward(in).logits.to_vector<float>();
  const std::vector<int64_t> types{2, 0, 41};
  in.token_type_ids = Tensor::from_vector(types, {1, 3});
  const std::vector<float> typed = model->forward(in).logits.to_vector<float>();
  EXPECT_NE(typed, plain);
  Tensor wte, wpe;
  for (auto& [name, p] : model->named_parameters()) {
    if (name == "transformer.wte.weight") wte = p;
    if (name == "transformer.wpe.weight") wpe = p;
  }
  ASSERT_TRUE(wte.defined() && wpe.defined());
  std::vector<float> pos = wpe.to_vector<float>();
  const std::vector<float> words = wte.to_vector<float>();
  const int64_t C = wpe.dim(1);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t k = 0; k < C; ++k) pos[t * C + k] += words[types[t] * C + k];
  wpe.set_data(Tensor::from_vector(pos, wpe.shape()));
  in.token_type_ids = Tensor();
  const std::vector<float> moved = model->forward(in).logits.to_vector<float>();
  ASSERT_EQ(moved.size(), typed.size());
  for (size_t i = 0; i < typed.size(); ++i) EXPECT_NEAR(moved[i], typed[i], 1e-5) << i;
  in.token_type_ids = Tensor::from_vector(std::vector<int64_t>{1, 2}, {1, 2});
  EXPECT_CONTAINS(testing::error_of([&] { model->forward(in); }), "token_type_ids [1,2] must be integer ids like input_ids [1,3]");
}

// Inputs a model's HF forward has no argument for are errors, not ignored.
TEST(Pretrained, InputsAModelDoesNotTakeAreNamed) {
  auto gpt2 = models::create_model("GPT2LMHeadModel", *models::preset_config("gpt2-tiny"), 4);
  auto bert = models::create_model("BertForSequenceClassification", tiny_config(), 4);
  auto qa = models::create_model("BertForQuestionAnswering", tiny_config(), 4);
  auto t5 = models::create_model("T5ForConditionalGeneration", kiln::testing::tiny_t5(), 3);
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{5, 7}, {1, 2});
  in.decoder_input_ids = Tensor::from_vector(std::vector<int64_t>{1}, {1, 1});
  EXPECT_CONTAINS(testing::error_of([&] { gpt2->forward(in); }), "GPT2LMHeadModel takes no decoder_input_ids (its inputs: input_ids, "
                                       "attention_mask, token_type_ids, labels, position_ids)");
  EXPECT_CONTAINS(testing::error_of([&] { bert->forward(in); }), "BertForSequenceClassification takes no decoder_input_ids");
  EXPECT_NO_THROW(t5->forward(in));
  in.decoder_input_ids = Tensor();
  in.token_type_ids = Tensor::from_vector(std::vector<int64_t>{0, 1}, {1, 2});
  EXPECT_CONTAINS(testing::error_of([&] { t5->forward(in); }), "T5ForConditionalGeneration takes no token_type_ids");
  EXPECT_NO_THROW(bert->forward(in));
  in.labels = Tensor::from_vector(std::vector<int64_t>{1}, {1});
  EXPECT_CONTAINS(testing::error_of([&] { qa->forward(in); }), "BertForQuestionAnswering takes no labels");
  in.labels = Tensor();
  in.start_positions = Tensor::from_vector(std::vector<int64_t>{1}, {1});
  in.end_positions = Tensor::from_vector(std::vector<int64_t>{1}, {1});
  EXPECT_NO_THROW(qa->forward(in));
  EXPECT_CONTAINS(testing::error_of([&] { bert->forward(in); }), "BertForSequenceClassification takes no start_positions");
  models::ModelInputs t5in;
  t5in.input_ids = in.input_ids;
  t5in.labels = Tensor::from_vector(std::vector<int64_t>{1}, {1});
  EXPECT_CONTAINS(testing::error_of([&] { t5->forward(t5in); }), "labels must be [batch, target_len] with at least one target token, got [1]");
}

// An empty sequence gives empty logits (the products have no rows) and, with
// labels, a NaN loss: the mean over no tokens, as PyTorch's.
TEST(Pretrained, AnEmptySequenceGivesEmptyLogits) {
  auto model = models::create_model("GPT2LMHeadModel", *models::preset_config("gpt2-tiny"), 4);
  model->eval();
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(std::vector<int64_t>{}, {1, 0});
  in.labels = in.input_ids;
  const models::ModelOutputs out = model->forward(in);
  EXPECT_EQ(out.logits.shape(), (Shape{1, 0, 50257}));
  EXPECT_TRUE(out.logits.to_vector<float>().empty());
  EXPECT_TRUE(std::isnan(out.loss.item()));
}

TEST(Pretrained, T5RelativePositionBucketsAsHuggingFace) {
  using models::t5_relative_position_bucket;
  // bidirectional, 32 buckets, max distance 128: 16 per direction, 8 exact
  EXPECT_EQ(t5_relative_position_bucket(0, true, 32, 128), 0);
  EXPECT_EQ(t5_relative_position_bucket(-1, true, 32, 128), 1);
  EXPECT_EQ(t5_relative_position_bucket(1, true, 32, 128), 17);
  EXPECT_EQ(t5_relative_position_bucket(7, true, 32, 128), 23);
  EXPECT_EQ(t5_relative_position_bucket(8, true, 32, 128), 24);
  EXPECT_EQ(t5_relative_position_bucket(-200, true, 32, 128), 15);  // capped
  // causal: future keys share bucket 0, the past uses all 32 (16 exact)
  EXPECT_EQ(t5_relative_position_bucket(3, false, 32, 128), 0);
  EXPECT_EQ(t5_relative_position_bucket(-3, false, 32, 128), 3);
  EXPECT_EQ(t5_relative_position_bucket(-20, false, 32, 128), 17);
}

TEST(Pretrained, T5RoundTrip) {
  TempDir dir;
  models::T5Config c = kiln::testing::tiny_t5();
  c.tie_word_embeddings = false;
  auto model = models::create_model("T5ForConditionalGeneration", c, 3);
  model->eval();
  model->save_pretrained(dir.path());
  auto loaded = models::from_pretrained(dir.path());
  loaded->eval();
  models::ModelInputs in = kiln::testing::tiny_t5_batch();
  auto a = model->forward(in), b = loaded->forward(in);
  EXPECT_EQ(a.logits.to_vector<float>(), b.logits.to_vector<float>());
  EXPECT_EQ(a.logits.shape(), (Shape{2, 3, 50}));
  EXPECT_FLOAT_EQ(a.loss.item(), b.loss.item());
  auto file = io::SafetensorsFile::open(dir.path() / "model.safetensors");
  EXPECT_NE(file.find("lm_head.weight"), nullptr);
  EXPECT_NE(file.find("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"), nullptr);
  EXPECT_EQ(file.find("encoder.block.1.layer.0.SelfAttention.relative_attention_bias.weight"), nullptr);
  EXPECT_NE(file.find("decoder.block.1.layer.2.DenseReluDense.wi_1.weight"), nullptr);
}

TEST(Pretrained, InitialisationFollowsHuggingFace) {
  models::BertConfig c = tiny_config();
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.intermediate_size = 128;
  c.vocab_size = 1000;
  auto model = models::create_model("BertForSequenceClassification", c, 11);
  auto sd = model->state_dict();
  auto w = sd.at("bert.embeddings.word_embeddings.weight").to_vector<double>();
  double s2 = 0;
  for (size_t i = 64; i < w.size(); ++i) s2 += w[i] * w[i];  // row 0 is the zeroed padding row
  EXPECT_NEAR(std::sqrt(s2 / (w.size() - 64)), c.initializer_range, 0.002);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(w[i], 0.0);
  for (double v : sd.at("bert.encoder.layer.0.attention.self.query.bias").to_vector<double>()) EXPECT_EQ(v, 0.0);
  for (double v : sd.at("bert.encoder.layer.0.output.LayerNorm.weight").to_vector<double>()) EXPECT_EQ(v, 1.0);
}

// T5 as transformers 5 saves it: config.json always says tie_word_embeddings
// true, scale_decoder_outputs says whether the decoder output is scaled
// (false for T5 v1.1), and a v1.1 checkpoint keeps its own lm_head.weight,
// which transformers 5 loads untied because it differs from shared.weight.
TEST(Pretrained, T5AsTransformers5SavesItScalesAndTiesByItsFields) {
  const fs::path golden = fs::path(KILN_TEST_DATA_DIR) / "t5";
  const models::ModelInputs in = testing::tiny_t5_batch();
  auto logits_of = [&](const fs::path& dir) { return models::from_pretrained(dir)->forward(in).logits; };
  TempDir root;
  int copies = 0;
  // A copy of golden model `name` with `fields` set in its config.json.
  auto resaved = [&](const std::string& name, const nlohmann::json& fields) {
    const fs::path dir = root.path() / std::to_string(copies++);
    fs::create_directories(dir);
    fs::copy_file(golden / name / "model.safetensors", dir / "model.safetensors");
    nlohmann::json c = read_json_file(golden / name / "config.json");
    c.update(fields);
    io::write_json_file_atomic(dir / "config.json", c);
    return dir;
  };
  // v1.1 (gated, own head): the same logits as its transformers 4 form, and saved untied.
  const fs::path v11 = resaved("t5_gated_untied", {{"tie_word_embeddings", true}, {"scale_decoder_outputs", false}});
  const Tensor want = logits_of(golden / "t5_gated_untied");
  auto model = models::from_pretrained(v11);
  EXPECT_EQ(model->forward(in).logits.to_vector<float>(), want.to_vector<float>());
  TempDir out;
  model->save_pretrained(out.path());
  const nlohmann::json saved = read_json_file(out.path() / "config.json");
  EXPECT_EQ(saved["tie_word_embeddings"], false);
  EXPECT_EQ(saved["scale_decoder_outputs"], false);
  EXPECT_TRUE(io::SafetensorsFile::open(out.path() / "model.safetensors").find("lm_head.weight"));
  // Tied without the scaling: the tied model's logits times sqrt(d_model).
  const fs::path unscaled = resaved("t5_relu_tied", {{"scale_decoder_outputs", false}});
  const auto tied = logits_of(golden / "t5_relu_tied").to_vector<float>();
  const auto got = logits_of(unscaled).to_vector<float>();
  const double root_d = std::sqrt(static_cast<double>(read_json_file(golden / "t5_relu_tied" / "config.json")["d_model"]));
  ASSERT_EQ(got.size(), tied.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], tied[i] * root_d, 1e-4 * (1 + std::fabs(got[i]))) << i;
  // Told to scale, the tied model is unchanged.
  EXPECT_EQ(logits_of(resaved("t5_relu_tied", {{"scale_decoder_outputs", true}})).to_vector<float>(), tied);
}

TEST(Pretrained, FineTuningATinyBertLowersTheLoss) {
  models::BertConfig c = tiny_config();
  c.hidden_dropout_prob = 0.0;
  c.attention_probs_dropout_prob = 0.0;
  c.set_num_labels(2);
  auto model = models::create_model("BertForSequenceClassification", c, 2);
  model->train();
  optim::AdamW opt(model->parameters(), {.lr = 3e-3});
  // Label = whether token 7 occurs in the sequence.
  std::vector<int64_t> ids, labels;
  for (int i = 0; i < 16; ++i) {
    bool has = i % 2 == 0;
    for (int t = 0; t < 6; ++t) ids.push_back(t == i % 6 && has ? 7 : 10 + (i * 5 + t * 3) % 30);
    labels.push_back(has);
  }
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {16, 6}, Device::cpu(), "input_ids");
  in.labels = Tensor::from_vector(labels, {16}, Device::cpu(), "labels");
  float first = 0, last = 0;
  metrics::reset();
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    Tensor loss = model->forward(in).loss;
    loss.backward();
    opt.step();
    mark_step();
    (step == 0 ? first : last) = loss.item();
  }
  EXPECT_LT(last, 0.5 * first) << first << " -> " << last;
  EXPECT_EQ(metrics::snapshot().compiles, 1) << metrics::report();
}

}  // namespace
}  // namespace kiln
