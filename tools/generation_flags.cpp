#include "generation_flags.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "kiln/core/error.h"
#include "kiln/models/generation_config.h"
#include "kiln/models/stopping_criteria.h"
#include "train_common.h"

namespace kiln::cli {

namespace {

// The list-valued logits-processor flags, in generation_config.json's form.
constexpr const char* kProcessorLists[] = {"suppress_tokens", "begin_suppress_tokens", "bad_words_ids",
                                           "forced_eos_token_id", "sequence_bias", "exponential_decay_length_penalty"};

// A list flag's text as generation_config.json holds the setting: JSON ("[[5], [7, 8]]") or comma-separated
// numbers ("5,7", "10,1.5"; "" for none).
nlohmann::json list_flag(const std::string& command, const std::string& key, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first != std::string::npos && text[first] == '[') {
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(command + ": --" + key + ": '" + text + "' is not valid JSON (" + e.what() + ")");
    }
  }
  nlohmann::json out = nlohmann::json::array();
  if (first == std::string::npos) return out;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    std::string piece = text.substr(start, comma - start);
    piece.erase(0, piece.find_first_not_of(" \t"));
    piece.erase(piece.find_last_not_of(" \t") + 1);
    if (piece.find_first_of(".eE") == std::string::npos) out.push_back(integer_value(command, key, piece));
    else out.push_back(number_value(command, key, piece));
    start = comma + 1;
  }
  return out;
}

// --stop_strings: a JSON list of strings ('["\n\n", "###"]', escapes read as JSON reads them), "" for none, or the
// text itself as the one stop string.
nlohmann::json stop_strings_flag(const std::string& command, const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return nlohmann::json::array();  // "" for none, as the other list flags
  if (text[first] != '[') return text;
  return list_flag(command, "stop_strings", text);
}

// The logits processors' flags given (their generation_config.json names and forms), over g.
void read_processor_flags(const Flags& flags, models::GenerationConfig& g, const std::string& command) {
  for (const char* key : kProcessorLists)
    if (flags.has(key))
      models::apply_generation_setting(key, list_flag(command, key, flags.get(key)), command + ": --" + key, g);
  if (flags.has("forced_bos_token_id")) g.forced_bos_token_id = flags.integer("forced_bos_token_id", 0, 0);
  if (flags.has("stop_strings"))
    models::apply_generation_setting("stop_strings", stop_strings_flag(command, flags.get("stop_strings")),
                                     command + ": --stop_strings", g);
  if (flags.has("max_time")) g.max_time = flags.number("max_time", 0);
  g.encoder_repetition_penalty = flags.number("encoder_repetition_penalty", g.encoder_repetition_penalty);
  g.guidance_scale = flags.number("guidance_scale", g.guidance_scale);
  g.encoder_no_repeat_ngram_size = flags.integer("encoder_no_repeat_ngram_size", g.encoder_no_repeat_ngram_size);
  g.renormalize_logits = flags.switch_or("renormalize_logits", g.renormalize_logits);
  g.remove_invalid_values = flags.switch_or("remove_invalid_values", g.remove_invalid_values);
}

}  // namespace

std::vector<FlagSpec> beam_flag_specs() {
  std::vector<FlagSpec> specs = {{"num_beams", true, false, "generation_num_beams"}, {"length_penalty"},
                                 {"early_stopping"}, {"num_return_sequences"}, {"repetition_penalty"},
                                 {"no_repeat_ngram_size"}, {"min_new_tokens"}, {"min_length"},
                                 {"forced_bos_token_id"}, {"renormalize_logits", false},
                                 {"remove_invalid_values", false}, {"stop_strings"}, {"max_time"},
                                 {"encoder_repetition_penalty"}, {"encoder_no_repeat_ngram_size"}, {"guidance_scale"}};
  for (const char* key : kProcessorLists) specs.push_back({key});
  return specs;
}

void read_beam_flags(const Flags& flags, models::GenerationConfig& g, const std::string& command) {
  g.num_beams = flags.integer("num_beams", g.num_beams);
  g.length_penalty = flags.number("length_penalty", g.length_penalty);
  g.num_return_sequences = flags.integer("num_return_sequences", g.num_return_sequences);
  g.repetition_penalty = flags.number("repetition_penalty", g.repetition_penalty);
  g.no_repeat_ngram_size = flags.integer("no_repeat_ngram_size", g.no_repeat_ngram_size);
  g.min_new_tokens = flags.integer("min_new_tokens", g.min_new_tokens);
  if (flags.has("min_length")) g.min_length = flags.integer("min_length", 0);
  read_processor_flags(flags, g, command);
  if (flags.has("early_stopping")) {
    try {
      g.early_stopping = models::parse_early_stopping(flags.get("early_stopping"));
    } catch (const Error& e) {
      throw Error(command + ": --" + e.what());
    }
  }
  if (g.num_beams == 1)  // as HF's GenerationConfig.validate warns
    for (const char* k : {"length_penalty", "early_stopping"})
      if (flags.has(k))
        std::fprintf(stderr, "kiln %s: warning: --%s only applies with --num_beams > 1 (beam search); ignored\n",
                     command.c_str(), k);
}

void attach_stop_strings(models::GenerationConfig& g, const TokenizerBundle& tok) {
  if (g.stop_strings.empty()) return;
  g.stop_string_matcher = std::make_shared<const models::StopStrings>(
      models::StopStrings::from_tokenizer(g.stop_strings, tok.tokenizer, tok.dir));
}

}  // namespace kiln::cli
