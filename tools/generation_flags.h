#pragma once
// The beam-search flags kiln generate and kiln predict share: --num_beams,
// --length_penalty, --early_stopping (true, false or never),
// --num_return_sequences, and the logits processors' --repetition_penalty,
// --no_repeat_ngram_size, --min_new_tokens, --min_length, --suppress_tokens,
// --begin_suppress_tokens, --bad_words_ids, --forced_bos_token_id,
// --forced_eos_token_id, --sequence_bias, --exponential_decay_length_penalty,
// --renormalize_logits, --remove_invalid_values, the stopping criteria's
// --stop_strings (a JSON list of strings, or one string as written) and
// --max_time (seconds), --encoder_repetition_penalty,
// --encoder_no_repeat_ngram_size and --guidance_scale, over what the model's
// generation_config.json says. A list flag is JSON in generation_config.json's
// form ("[[5], [7, 8]]") or, for a flat list, comma-separated ("5,7").
#include <string>
#include <vector>

#include "flags.h"
#include "kiln/models/generation.h"

namespace kiln::cli {

struct TokenizerBundle;

std::vector<FlagSpec> beam_flag_specs();

// The flags given, over g (already holding the model's generation_config.json
// settings); `command` names the command in messages and warnings.
void read_beam_flags(const Flags& flags, models::GenerationConfig& g, const std::string& command);


// The stop-string matcher for g.stop_strings (if any), over the tokenizer's
// tokens (generate() refuses stop strings without it, as transformers does).
void attach_stop_strings(models::GenerationConfig& g, const TokenizerBundle& tok);

}  // namespace kiln::cli
