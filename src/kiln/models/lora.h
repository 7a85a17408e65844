#pragma once
// LoRA (Hu et al. 2021) as Hugging Face PEFT's LoraConfig defines it: the
// base model frozen, a low-rank branch scaling · B·A beside each targeted
// linear layer, and adapters in PEFT's files (adapter_config.json +
// adapter_model.safetensors), so `PeftModel.from_pretrained` opens what kiln
// writes and kiln opens what PEFT writes.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/models/model.h"

namespace kiln::models {

struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0.0;
  // PEFT's target_modules: module names matched as a dotted-path suffix
  // ("query" matches "bert.encoder.layer.0.attention.self.query"), or
  // {"all-linear"} (every linear layer but the output head; never an
  // embedding). Linear, Conv1D and Embedding layers can be targeted. Empty:
  // the architecture's default (default_lora_target_modules).
  std::vector<std::string> target_modules;
  // target_modules given as one string: a regular expression the whole
  // module path must match (PEFT's re.fullmatch). Overrides target_modules.
  std::optional<std::string> target_regex;
  // Modules excluded from targeting (same matching as target_modules).
  std::vector<std::string> exclude_modules;
  // exclude_modules given as one string: a regular expression the whole
  // module path must match (PEFT's re.fullmatch). Overrides exclude_modules.
  std::optional<std::string> exclude_regex;
  // PEFT's layers_to_transform / layers_pattern: with a target_modules list,
  // a module matched by a suffix (not named whole) is adapted only when its
  // layer index (the first ".<name>.<digits>." of its path, <name> one of
  // layers_pattern when given) is listed. Empty: every layer.
  std::vector<int64_t> layers_to_transform;
  std::vector<std::string> layers_pattern;  // regular expressions, as PEFT inserts them
  // Modules trained in full and saved with the adapter (a classification
  // head). A sequence- or token-classification model always adds
  // "classifier" and "score", a question-answering model "qa_outputs", as PEFT does.
  std::vector<std::string> modules_to_save;
  bool use_rslora = false;  // scaling alpha / √r instead of alpha / r
  // DoRA: each targeted linear layer also trains a magnitude per output row
  // (nn::LoraBranch::enable_dora). Embedding tables cannot take it.
  bool use_dora = false;
  // PEFT's `bias`: which of the base model's biases train and are saved with
  // the adapter: "none", "all" (every parameter named "bias") or "lora_only"
  // (the targeted layers' own).
  std::string bias = "none";
  // PEFT's `lora_bias`: lora_B has a bias of its own (zero at first). Not
  // with DoRA or on embedding tables; merging needs the layer to have a bias.
  bool lora_bias = false;
  // PEFT's trainable_token_indices: rows of an embedding table (or of an
  // untied output head) trained as they are, the rest of it frozen
  // (nn::TrainableTokens), saved as "<layer>.token_adapter.trainable_tokens_delta".
  // Keyed by module name (a path ending with it); the key "" is the model's
  // input embeddings (PEFT's list form). A head tied to the table follows it.
  std::map<std::string, std::vector<int64_t>> trainable_token_indices;
  // Per-module overrides: regex key (matched against the path's end) → rank / alpha.
  std::map<std::string, int64_t> rank_pattern;
  std::map<std::string, double> alpha_pattern;
  bool fan_in_fan_out = false;  // set by apply_lora when a target is a Conv1D (GPT-2)
  std::string task_type;        // empty: from the architecture (SEQ_CLS, CAUSAL_LM, ...)
  std::string base_model_name_or_path;
  uint64_t seed = 42;  // draws lora_A's initial values

  // PEFT's adapter_config.json, with the fields PEFT 0.10 and later write.
  nlohmann::json to_json() const;
  // Reads one; errors name `file` and the key (an unsupported peft_type, or
  // an option kiln does not implement, such as use_dora).
  static LoraConfig from_json(const nlohmann::json& j, const std::string& file);
};

// The default target_modules of a model_type, as PEFT's
// TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING has them. The one place
// architectures list theirs; empty when there is none.
std::vector<std::string> default_lora_target_modules(const std::string& model_type);

// PEFT's task_type for an architecture ("BertForSequenceClassification" → "SEQ_CLS").
std::string peft_task_type(const std::string& architecture);

// get_peft_model: freezes every parameter of `model`, attaches a fresh LoRA
// branch (A Kaiming-uniform, B zero) to each targeted layer and leaves
// modules_to_save trainable. The resolved config (targets, task type) is
// kept on the model. A target list matching nothing is an error listing
// the model's linear layers.
void apply_lora(PreTrainedModel& model, LoraConfig config);

// The adapter's tensors by PEFT's file keys ("base_model.model.<path>.lora_A.weight",
// and each modules_to_save parameter as "base_model.model.<path>").
std::vector<std::pair<std::string, Tensor>> adapter_state(const PreTrainedModel& model);

// save_pretrained of a PeftModel: DIR/adapter_config.json and DIR/adapter_model.safetensors.
void save_adapter(const PreTrainedModel& model, const std::filesystem::path& dir);
// Reads DIR/adapter_config.json.
LoraConfig read_adapter_config(const std::filesystem::path& dir);
// PeftModel.from_pretrained: applies DIR's config to `model` and loads its
// weights. Missing or mis-shaped adapter tensors and tensors of modules the
// model lacks are errors naming the file and key.
void load_adapter(PreTrainedModel& model, const std::filesystem::path& dir);
// PEFT saves the word-embedding tables (and an untied output head) with an
// adapter made after resize_token_embeddings. When DIR's tables have another
// vocabulary than `model`, returns the model rebuilt with that vocabulary
// (config vocab_size included; every other tensor copied, the resized tables
// left to load_adapter to fill), else `model` itself. An adapter that
// resizes one table but lacks another of the model's is an error naming it.
std::unique_ptr<PreTrainedModel> resize_for_adapter(std::unique_ptr<PreTrainedModel> model,
                                                    const std::filesystem::path& dir);
// Loads DIR's weights into a model apply_lora already adapted with the same
// config (resuming a checkpoint).
void load_adapter_weights(PreTrainedModel& model, const std::filesystem::path& dir);
// merge_and_unload: folds each branch into its layer's weight (scaling · B·A,
// transposed for a Conv1D) and removes the branches; every parameter trains again.
void merge_lora(PreTrainedModel& model);

// Whether DIR holds an adapter (adapter_config.json).
bool is_adapter_dir(const std::filesystem::path& dir);

// The base model directory an adapter names (base_model_name_or_path): as
// given when it exists, else relative to the adapter directory. An error
// naming the file when it names none that exists.
std::filesystem::path adapter_base_dir(const std::filesystem::path& adapter_dir);

// A base model with an adapter on it, as `AutoPeftModel.from_pretrained`:
// `adapter` empty and `model` an adapter directory: its named base;
// `adapter` given: `model` is the base. Neither: from_pretrained(model).
// A base whose vocabulary the adapter resized is rebuilt (resize_for_adapter).
std::unique_ptr<PreTrainedModel> from_pretrained_with_adapter(const std::filesystem::path& model,
                                                              const std::filesystem::path& adapter,
                                                              const LoadOptions& options = {});

}  // namespace kiln::models
