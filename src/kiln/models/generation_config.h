#pragma once
// generation_config.json, as transformers reads and writes it: the decoding
// settings a model directory carries (num_beams, length_penalty, ...), and
// the file save_pretrained writes for a model that generates.
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "kiln/models/generation.h"

namespace kiln::models {

// Whether the architecture has a language-model head generate() runs
// (GPT2LMHeadModel, *ForCausalLM, *ForConditionalGeneration).
bool generates_text(const std::string& architecture);

// transformers' GenerationConfig.from_model_config: the config's bos, eos,
// pad and decoder-start token ids (and beam settings an older config.json
// holds); null for a model that does not generate.
nlohmann::ordered_json default_generation_config(const PreTrainedModel& model);

// Applies the decoding settings `dir`/generation_config.json holds (or, with
// no such file, those config.json holds, as transformers falls back to), as
// model.generate() starts from model.generation_config: max_new_tokens (or
// max_length), do_sample, temperature, top_k, top_p, min_p, the beam settings
// (num_beams, length_penalty, early_stopping, num_return_sequences),
// repetition_penalty, no_repeat_ngram_size, min_length, min_new_tokens,
// eos_token_id (one id or a list) and the other logits processors and
// warpers (logits_processors.h: typical_p, suppress_tokens, bad_words_ids,
// sequence_bias, ...; an empty list sets nothing). A value of the wrong type
// is an error naming the file and the key. Settings that would change the
// tokens and that kiln does not build (num_beam_groups, force_words_ids,
// guidance_scale, stop_strings, ...) are named in a warning on stderr, once
// per file, when they hold anything but their neutral values.
// An empty `dir` (a model from a preset) applies nothing.
void apply_generation_config(const std::filesystem::path& dir, GenerationConfig& g);

// One logits-processor or warper setting (typical_p, epsilon_cutoff,
// eta_cutoff, suppress_tokens, begin_suppress_tokens, bad_words_ids,
// forced_bos_token_id, forced_eos_token_id, sequence_bias,
// exponential_decay_length_penalty, renormalize_logits,
// remove_invalid_values) in its generation_config.json form, read as
// apply_generation_config reads it; `source` (a file, a flag) names it in the
// error a wrong value gives.
void apply_generation_setting(const std::string& key, const nlohmann::json& value, const std::string& source,
                              GenerationConfig& g);

}  // namespace kiln::models
