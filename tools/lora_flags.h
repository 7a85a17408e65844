#pragma once
// What the commands share for LoRA: kiln train's PEFT flags (TRL's names and
// defaults) and the model directory to read tokenizer files from when a
// command is given an adapter.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/models/lora.h"

namespace kiln::cli {

// --lora_r, --lora_alpha, --lora_dropout, --lora_target_modules, --lora_modules_to_save, --lora_train_bias,
// --trainable_token_indices.
extern const std::vector<std::string> kLoraFlags;
// --use_peft, --use_rslora, --use_dora, --lora_bias.
extern const std::vector<std::string> kLoraSwitches;

// The LoraConfig of kiln train's flags when --use_peft is on (TRL's defaults:
// r 16, alpha 32, dropout 0.05, the architecture's default targets); nullopt
// otherwise (a LoRA flag without --use_peft is a warning). Lists are comma-separated.
std::optional<models::LoraConfig> lora_from_flags(const std::map<std::string, std::string>& f, uint64_t seed);

// Where a command given --model DIR [--adapter A] finds the tokenizer: the
// adapter's directory when it has tokenizer files (a kiln train output), else the base's.
std::filesystem::path tokenizer_dir_for(const std::filesystem::path& model, const std::filesystem::path& adapter);

}  // namespace kiln::cli
