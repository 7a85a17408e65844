#pragma once
// The model registry: each model file describes its family (the config.json
// model types it reads, the HF architectures it builds, its presets) in one
// ModelFamily, and registry.cpp lists the families. AutoConfig, AutoModel,
// the presets and the messages naming what kiln supports all read this list.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/models/model.h"

namespace kiln::models {

struct ModelFamily {
  std::vector<std::string> model_types;    // config.json's model_type values: {"bert", "roberta", "distilbert"}
  std::vector<std::string> architectures;  // the HF classes it builds: "BertForSequenceClassification", ...
  std::vector<std::string> aliases;        // older class names built too, not listed ("T5WithLMHeadModel")
  std::vector<std::string> presets;        // `kiln init` names
  // config.json (of one of model_types) -> the config; errors name `source`.
  std::unique_ptr<PretrainedConfig> (*read_config)(const nlohmann::json& j, const std::string& source);
  // The preset of a name in `presets`.
  std::unique_ptr<PretrainedConfig> (*preset)(const std::string& name);
  // Builds one of architectures (or aliases) with fresh weights from a config of one of model_types.
  std::unique_ptr<PreTrainedModel> (*build)(const std::string& architecture, const PretrainedConfig& config,
                                            uint64_t seed, Device device);
};

// Every family, in the order messages list them.
const std::vector<const ModelFamily*>& model_families();
// The family reading `model_type`, or null.
const ModelFamily* family_of_type(const std::string& model_type);
// The family building `architecture` (or one of its aliases), or null.
const ModelFamily* family_of_architecture(const std::string& architecture);

// Each prefix followed by each suffix: {"Bert", "Roberta"} x {"Model", "ForMaskedLM"}.
std::vector<std::string> class_names(const std::vector<std::string>& prefixes, const std::vector<std::string>& suffixes);

// ModelFamily::read_config of a config class with a static from_json.
template <class Config>
std::unique_ptr<PretrainedConfig> read_config_as(const nlohmann::json& j, const std::string& source) {
  return std::make_unique<Config>(Config::from_json(j, source));
}

// ModelFamily::preset of a config class with a static preset(name) -> std::optional<Config>.
template <class Config>
std::unique_ptr<PretrainedConfig> preset_as(const std::string& name) {
  std::optional<Config> c = Config::preset(name);
  return c ? std::make_unique<Config>(std::move(*c)) : nullptr;
}

// ModelFamily::build of a model class constructed from (architecture, Config, seed, device).
template <class Model, class Config>
std::unique_ptr<PreTrainedModel> build_as(const std::string& architecture, const PretrainedConfig& config,
                                          uint64_t seed, Device device) {
  auto* c = dynamic_cast<const Config*>(&config);
  KILN_CHECK(c, "architecture ", architecture, " cannot be built from a config of model_type '", config.model_type,
             "' made as another config class");
  return std::make_unique<Model>(architecture, *c, seed, device);
}

// The families each model file defines (listed by registry.cpp).
const ModelFamily& bert_family();
const ModelFamily& gpt2_family();
const ModelFamily& llama_family();
const ModelFamily& t5_family();
const ModelFamily& deberta_family();

}  // namespace kiln::models
