#pragma once
// The beam-search flags kiln generate and kiln predict share: --num_beams,
// --length_penalty, --early_stopping (true, false or never),
// --num_return_sequences, and the logits processors' --repetition_penalty,
// --no_repeat_ngram_size, --min_new_tokens and --min_length, over what the
// model's generation_config.json says.
#include <string>
#include <vector>

#include "flags.h"
#include "kiln/models/generation.h"

namespace kiln::cli {

std::vector<FlagSpec> beam_flag_specs();

// The flags given, over g (already holding the model's generation_config.json
// settings); `command` names the command in messages and warnings.
void read_beam_flags(const Flags& flags, models::GenerationConfig& g, const std::string& command);

}  // namespace kiln::cli
