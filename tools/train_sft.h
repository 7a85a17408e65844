#pragma once
// kiln train --task sft: TRL SFTTrainer's data (conversations, prompt-completion
// pairs or text, rendered with the tokenizer's chat template) and flags
// (--assistant_only_loss, --completion_only_loss, --packing, --packing_strategy, --max_length).
// The model side is causal-lm's; only the data differs. docs/sft.md.
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data/features.h"
#include "train_common.h"

namespace kiln::cli {

// The flags --task sft reads (kiln train's flag lists take them in).
inline const std::vector<std::string> kSftFlags = {"completion_only_loss", "max_length", "dataset_text_field",
                                                   "packing_strategy", "eval_packing"};
// padding_free changes nothing: kiln's padded batches already compute what TRL's padding-free rows do (each
// example attends to itself alone, its positions from 0).
inline const std::vector<std::string> kSftSwitches = {"assistant_only_loss", "packing", "padding_free"};

// Whether `path` (a .jsonl / .json file) holds conversational or prompt-completion rows: --task causal-lm reads it
// as SFT data then.
bool is_sft_file(const std::filesystem::path& path);

// TRL's max_length: --max_length, else --max_seq_length, else 1024.
std::optional<int64_t> sft_max_length_flag(const std::map<std::string, std::string>& flags);

// The tokenized (and with --packing, packed) rows of an SFT file, with a line on stderr telling what was read
// (format, rows, tokens, dropped rows, and with packing the padding saved). The evaluation file is packed as
// --eval_packing says, else as --packing (TRL's eval_packing).
std::shared_ptr<data::Features> sft_features(const std::filesystem::path& file, const TokenizerBundle& tok,
                                             const std::map<std::string, std::string>& flags, int64_t max_length,
                                             bool evaluation = false);

// The id SFT pads with: tokenizer_config.json's pad_token, else its eos_token (TRL's fallback), else the
// tokenizer's pad id.
int64_t sft_padding_id(const TokenizerBundle& tok);

}  // namespace kiln::cli
