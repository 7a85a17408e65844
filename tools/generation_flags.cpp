#include "generation_flags.h"

#include <cstdio>

#include "kiln/core/error.h"

namespace kiln::cli {

std::vector<FlagSpec> beam_flag_specs() {
  return {{"num_beams", true, false, "generation_num_beams"}, {"length_penalty"}, {"early_stopping"},
          {"num_return_sequences"}, {"repetition_penalty"}, {"no_repeat_ngram_size"}, {"min_new_tokens"},
          {"min_length"}};
}

void read_beam_flags(const Flags& flags, models::GenerationConfig& g, const std::string& command) {
  g.num_beams = flags.integer("num_beams", g.num_beams);
  g.length_penalty = flags.number("length_penalty", g.length_penalty);
  g.num_return_sequences = flags.integer("num_return_sequences", g.num_return_sequences);
  g.repetition_penalty = flags.number("repetition_penalty", g.repetition_penalty);
  g.no_repeat_ngram_size = flags.integer("no_repeat_ngram_size", g.no_repeat_ngram_size);
  g.min_new_tokens = flags.integer("min_new_tokens", g.min_new_tokens);
  if (flags.has("min_length")) g.min_length = flags.integer("min_length", 0);
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

}  // namespace kiln::cli
