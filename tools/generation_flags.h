#pragma once
// The beam-search flags kiln generate and kiln predict share: --num_beams,
// --length_penalty, --early_stopping (true, false or never),
// --num_return_sequences, and the logits processors' --repetition_penalty,
// --no_repeat_ngram_size, --min_new_tokens, --min_length, --suppress_tokens,
// --begin_suppress_tokens, --bad_words_ids, --forced_bos_token_id,
// --forced_eos_token_id, --sequence_bias, --exponential_decay_length_penalty,
// --renormalize_logits and --remove_invalid_values, over what the model's
// generation_config.json says. A list flag is JSON in generation_config.json's
// form ("[[5], [7, 8]]") or, for a flat list, comma-separated ("5,7").
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
