// The model registry and the config field tables: every family is found by
// its model types and architectures, configs answer the questions tools ask,
// and config.json is written exactly as before the tables (files in
// tests/goldens/configs, written by `kiln init --config PRESET`).
#include <gtest/gtest.h>

#include <set>

#include "kiln/core/json.h"
#include "kiln/io/json_file.h"
#include "kiln/models/deberta.h"
#include "kiln/models/gpt2.h"
#include "kiln/models/llama.h"
#include "kiln/models/registry.h"
#include "kiln/models/t5.h"
#include "support/test_util.h"

namespace kiln {
namespace {

using models::ModelTask;
using testing::error_of;

std::unique_ptr<models::PretrainedConfig> config_of(const std::string& text) {
  return models::config_from_json(parse_json(text, "config.json"), "config.json");
}

TEST(ModelRegistry, EachTypeAndArchitectureHasOneFamily) {
  std::set<std::string> types, archs;
  for (const models::ModelFamily* f : models::model_families()) {
    for (const auto& t : f->model_types) {
      EXPECT_TRUE(types.insert(t).second) << t;
      EXPECT_EQ(models::family_of_type(t), f) << t;
    }
    for (const auto& a : f->architectures) {
      EXPECT_TRUE(archs.insert(a).second) << a;
      EXPECT_EQ(models::family_of_architecture(a), f) << a;
    }
    for (const auto& p : f->presets) {
      auto c = models::preset_config(p);
      ASSERT_TRUE(c) << p;
      EXPECT_NE(std::find(f->model_types.begin(), f->model_types.end(), c->model_type), f->model_types.end()) << p;
    }
  }
  EXPECT_EQ(archs.size(), models::supported_architectures().size());
  EXPECT_EQ(models::family_of_architecture("T5WithLMHeadModel"), models::family_of_type("t5"));
  EXPECT_EQ(models::family_of_type("bort"), nullptr);
  EXPECT_EQ(models::preset_config("bort-tiny"), nullptr);
  EXPECT_EQ(models::causal_lm_types(), "gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, phi3");
  EXPECT_CONTAINS(error_of([] { config_of(R"({"model_type": "bort"})"); }),
                  "config.json: model_type 'bort' is not supported (supported: bert, roberta, distilbert, gpt2, llama, "
                  "mistral, qwen2, qwen3, gemma, gemma2, phi3, t5, deberta-v2)");
  auto bert = models::preset_config("bert-tiny");
  EXPECT_EQ(error_of([&] { models::create_model("GPT2Model", *bert); }),
            "architecture GPT2Model needs a config of model_type gpt2, got model_type 'bert'");
  EXPECT_CONTAINS(error_of([&] { models::create_model("BertForCausalLM", *bert); }),
                  "unsupported architecture 'BertForCausalLM' (supported: BertModel, ");
}

TEST(ModelRegistry, PresetsWriteTheConfigJsonTheyAlwaysWrote) {
  for (const char* p : {"bert-tiny", "distilbert-tiny", "gpt2-tiny", "llama-tiny", "llama3-tiny", "qwen3-tiny",
                        "mistral-tiny", "gemma-tiny", "gemma2-tiny", "phi3-tiny", "t5-tiny", "t5-v1_1-tiny",
                        "deberta-v3-tiny"}) {
    const nlohmann::json expected = read_json_file(std::string(KILN_TEST_DATA_DIR) + "/configs/" + p + ".json");
    auto c = models::preset_config(p);
    ASSERT_TRUE(c) << p;
    EXPECT_EQ(c->to_json().dump(), expected.dump()) << p;
    // Read back, the same config.json again.
    EXPECT_EQ(models::config_from_json(expected, p)->to_json().dump(), expected.dump()) << p;
  }
}

TEST(ConfigFields, ReadKeysTypesNullsAndUnknownKeys) {
  EXPECT_EQ(error_of([] { config_of(R"({"model_type": "gpt2", "n_inner": "a"})"); }),
            "config.json: 'n_inner' must be an integer, got string \"a\"");
  EXPECT_EQ(error_of([] { config_of(R"({"model_type": "distilbert", "dim": 1.5})"); }),
            "config.json: 'dim' must be an integer, got number 1.5");
  EXPECT_EQ(error_of([] { config_of(R"({"model_type": "gemma2", "hidden_activation": 3})"); }),
            "config.json: 'hidden_activation' must be a string, got number 3");
  // A null unsets an optional field (HF's None); unknown keys are kept and written back.
  auto g = config_of(R"({"model_type": "gpt2", "bos_token_id": null, "n_layer": 2, "my_key": [1, 2]})");
  const auto j = g->to_json();
  EXPECT_TRUE(j.at("bos_token_id").is_null());
  EXPECT_EQ(j.at("eos_token_id"), 50256);
  EXPECT_EQ(j.at("n_layer"), 2);
  EXPECT_EQ(j.at("my_key"), nlohmann::json::array({1, 2}));
  EXPECT_FALSE(j.contains("pad_token_id"));  // unset and omitted, as before
  EXPECT_EQ(j.at("n_ctx"), 1024);
  auto m = config_of(R"({"model_type": "mistral", "sliding_window": null, "hidden_act": "gelu", "hidden_size": 64,
                          "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
                          "num_key_value_heads": 2})");
  EXPECT_FALSE(static_cast<const models::LlamaConfig&>(*m).sliding_window);
  EXPECT_TRUE(m->to_json().at("sliding_window").is_null());
  EXPECT_EQ(m->to_json().at("hidden_act"), "gelu");
  EXPECT_FALSE(m->to_json().contains("pretraining_tp"));  // Llama's own key
}

TEST(ConfigQuestions, TasksTokenizersAndCheckpointKeys) {
  auto bert = models::preset_config("distilbert-tiny");
  EXPECT_EQ(bert->architecture_for(ModelTask::MultipleChoice), "DistilBertForMultipleChoice");
  EXPECT_EQ(bert->architecture_for(ModelTask::CausalLM), "");
  EXPECT_EQ(bert->ignored_checkpoint_keys(), std::vector<std::string>{"vocab_projector.weight"});
  auto qwen = models::preset_config("qwen3-tiny");
  EXPECT_EQ(qwen->architecture_for(ModelTask::CausalLM), "Qwen3ForCausalLM");
  EXPECT_EQ(qwen->architecture_for(ModelTask::SequenceClassification), "Qwen3ForSequenceClassification");
  EXPECT_EQ(models::causal_lm_architecture(*models::preset_config("gpt2-tiny")), "GPT2LMHeadModel");
  auto t5 = models::preset_config("t5-tiny");
  EXPECT_TRUE(t5->is_encoder_decoder());
  EXPECT_EQ(t5->architecture_for(ModelTask::Seq2SeqLM), "T5ForConditionalGeneration");

  // A config without weights takes the tokenizer's size and ids.
  t5->adapt_to_tokenizer({.vocab_size = 100, .pad_id = 3, .eos_id = 7});
  const auto& t = static_cast<const models::T5Config&>(*t5);
  EXPECT_EQ(t.vocabulary_size(), 100);
  EXPECT_EQ(t.pad_token_id, 3);
  EXPECT_EQ(t.decoder_start_token_id, 3);
  EXPECT_EQ(t.eos_token_id, 7);
  auto deberta = models::preset_config("deberta-v3-tiny");
  deberta->adapt_to_tokenizer({.vocab_size = 200, .pad_id = 1, .eos_id = std::nullopt});
  EXPECT_EQ(deberta->vocabulary_size(), 200);
  EXPECT_EQ(static_cast<const models::DebertaV2Config&>(*deberta).pad_token_id, 1);
  EXPECT_EQ(deberta->ignored_checkpoint_keys().size(), 2u);  // v3: no absolute positions
  // A decoder keeps a pad id its config names; batches pad with it.
  auto gpt2 = models::preset_config("gpt2-tiny");
  EXPECT_FALSE(gpt2->batch_pad_id());
  gpt2->adapt_to_tokenizer({.vocab_size = 300, .pad_id = 0, .eos_id = std::nullopt});
  EXPECT_EQ(gpt2->batch_pad_id(), 0);
  gpt2->adapt_to_tokenizer({.vocab_size = 300, .pad_id = 9, .eos_id = std::nullopt});
  EXPECT_EQ(gpt2->batch_pad_id(), 0);
  auto llama3 = models::preset_config("llama3-tiny");  // tied
  EXPECT_EQ(llama3->ignored_checkpoint_keys(), std::vector<std::string>{"lm_head.weight"});
  EXPECT_TRUE(models::preset_config("llama-tiny")->ignored_checkpoint_keys().empty());
}

TEST(ModelRegistry, ModelsAnswerGenerationAndHeads) {
  auto gpt2 = models::preset_config("gpt2-tiny");
  EXPECT_TRUE(models::create_model("GPT2LMHeadModel", *gpt2)->can_generate());
  EXPECT_FALSE(models::create_model("GPT2Model", *gpt2)->can_generate());
  auto t5 = models::preset_config("t5-tiny");
  EXPECT_TRUE(models::create_model("T5ForConditionalGeneration", *t5)->can_generate());
  auto encoder = models::create_model("T5EncoderModel", *t5);
  EXPECT_FALSE(encoder->can_generate());
  EXPECT_EQ(encoder->head_prefixes(), (std::vector<std::string>{"lm_head.", "decoder."}));
  EXPECT_FALSE(models::create_model("BertModel", *models::preset_config("bert-tiny"))->can_generate());
}

}  // namespace
}  // namespace kiln
