#pragma once
// The files Hugging Face's Trainer leaves in an output directory besides the
// model: a README.md model card (Trainer.create_model_card), the tokenizer's
// special_tokens_map.json (generation_config.json comes with save_pretrained).
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/models/model.h"
#include "kiln/train/training_args.h"
#include "train_common.h"

namespace kiln::cli {

// What the model card says about a run.
struct ModelCard {
  std::string name;        // the output directory's name
  std::string base_model;  // --model_name_or_path, or "" when trained from scratch
  std::string config;      // --config_name when trained from scratch
  std::string task;
  std::vector<std::string> train_files, eval_files;
  const train::TrainingArguments* args = nullptr;
  std::vector<nlohmann::json> log_history;  // trainer_state.json's
  int64_t replicas = 1;                     // processes x replicas: the global batch's factor
};

// HF's model card (TrainingSummary.to_model_card): YAML metadata, the
// evaluation results, the hyperparameters and the table of training results.
std::string model_card_text(const ModelCard& card);

// HF's special_tokens_map.json of a tokenizer: tokenizer_config.json's
// bos/eos/unk/sep/pad/cls/mask and additional special tokens, else the
// conventional ones its vocabulary holds ([CLS], <s>, <|endoftext|>, ...).
nlohmann::ordered_json special_tokens_map(const TokenizerBundle& tok);

// Writes README.md and special_tokens_map.json (unless the tokenizer has its
// own, copied with the model) into `dir`, atomically. (generation_config.json
// comes with the model: PreTrainedModel::save_pretrained writes it.)
void write_hf_output_files(const std::filesystem::path& dir, const ModelCard& card,
                           const models::PreTrainedModel& model, const TokenizerBundle& tok);

}  // namespace kiln::cli
