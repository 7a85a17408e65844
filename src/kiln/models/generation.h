#pragma once
// Text generation: greedy, sampling (temperature, top-k, top-p) or beam
// search (num_beams > 1, beam_search.h), stopping at EOS, for causal LMs
// (GPT-2, Llama) and encoder-decoders (T5). With the
// key/value cache each new token is one decode step whose graph depends only
// on the cache capacity (rounded up to a bucket), so it compiles once per
// bucket, not once per token.
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/models/gpt2.h"
#include "kiln/models/logits_processors.h"
#include "kiln/models/t5.h"

namespace kiln::models {

class StopStrings;

struct GenerationConfig {
  int64_t max_new_tokens = 20;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;   // 0 = off (50: transformers' default)
  double top_p = 1.0;   // 1 = off
  double min_p = 0.0;   // 0 = off
  uint64_t seed = 0;
  // Ids that end a sequence; empty: the model config's. An id outside the
  // vocabulary (-1) never stops.
  std::vector<int64_t> eos_token_ids;
  // HF's max_length: prompt + new tokens (an encoder-decoder counts its
  // decoder's start token), the longest prompt of the call deciding, as in a
  // padded batch. Used only when set, in place of max_new_tokens.
  std::optional<int64_t> max_length;
  bool use_cache = true;
  int64_t bucket = 64;  // cache capacity granularity
  // HF's logits processors, applied before greedy choice or sampling: every id
  // already in the sequence has its logit divided by repetition_penalty
  // (multiplied when negative); an id that would repeat an n-gram of
  // no_repeat_ngram_size tokens is never chosen (0 = off).
  double repetition_penalty = 1.0;
  int64_t no_repeat_ngram_size = 0;
  // HF's MinNewTokensLengthLogitsProcessor: an EOS id cannot be chosen before
  // min_new_tokens ids have been generated. min_length (MinLengthLogitsProcessor)
  // counts the prompt too (an encoder-decoder, its decoder's start token), the
  // longest prompt of the call deciding, as for max_length; a min_new_tokens
  // above 0 takes precedence over it, as in transformers.
  int64_t min_new_tokens = 0;
  std::optional<int64_t> min_length;
  // transformers' StopStringCriteria and MaxTimeCriteria (stopping_criteria.h):
  // a row (a beam-search candidate) stops once one of stop_strings ends in
  // its last token's text, read through stop_string_matcher (built from the
  // tokenizer for exactly these strings; StopStrings::from_tokenizer); every
  // row stops after the token it is on once max_time seconds have passed
  // since generate() started.
  std::vector<std::string> stop_strings;
  std::shared_ptr<const StopStrings> stop_string_matcher;
  std::optional<double> max_time;
  // EncoderRepetitionPenaltyLogitsProcessor: an id of the prompt (the
  // encoder's input; a decoder-only model's prompt) has its score multiplied
  // by encoder_repetition_penalty (divided when negative); and
  // EncoderNoRepeatNGramLogitsProcessor: an id that would make the last
  // encoder_no_repeat_ngram_size ids an n-gram of the prompt is never chosen
  // (0 = off).
  double encoder_repetition_penalty = 1.0;
  int64_t encoder_no_repeat_ngram_size = 0;
  // UnbatchedClassifierFreeGuidanceLogitsProcessor (decoder-only models; 1 =
  // off), first of the processors: the scores' log-softmax becomes
  // guidance_scale * (it - u) + u, u the log-softmax of the model's logits
  // for the prompt's last token and the tokens generated since (each beam its
  // own row of them, as transformers keeps them).
  double guidance_scale = 1.0;
  // The other logits processors of transformers (logits_processors.h, in the
  // order it applies them): sequence_bias adds each bias to the last id of a
  // sequence whose other ids end the row's ids; bad_words_ids bans such ids
  // (a single EOS id is dropped from the list); forced_bos_token_id is the
  // only choice after a one-token input, forced_eos_token_ids the only ones
  // for the last new token; remove_invalid_values makes NaN 0 and +-inf
  // float32's extremes; exponential_decay_length_penalty (start_index,
  // decay_factor) raises the EOS scores after start_index new ids;
  // suppress_tokens are never chosen, begin_suppress_tokens not as the first
  // new id (the second after a one-token input with a forced BOS);
  // renormalize_logits log-softmaxes the scores after everything else.
  std::vector<std::pair<std::vector<int64_t>, double>> sequence_bias;
  std::vector<std::vector<int64_t>> bad_words_ids;
  std::optional<int64_t> forced_bos_token_id;
  std::vector<int64_t> forced_eos_token_ids;
  bool remove_invalid_values = false;
  std::optional<std::pair<int64_t, double>> exponential_decay_length_penalty;
  std::vector<int64_t> suppress_tokens;
  std::vector<int64_t> begin_suppress_tokens;
  bool renormalize_logits = false;
  // Sampling warpers after min_p (TypicalLogitsWarper, EpsilonLogitsWarper,
  // EtaLogitsWarper): typical_p in (0, 1] (1 = off), epsilon_cutoff and
  // eta_cutoff in [0, 1) (0 = off).
  double typical_p = 1.0;
  double epsilon_cutoff = 0.0;
  double eta_cutoff = 0.0;
  // TopHLogitsWarper (after temperature, before top_k): of the 100 most
  // likely ids, the most likely ones whose entropy terms -p log p (p over
  // those 100) sum to at most top_h times their entropy, the first always;
  // in (0, 1].
  std::optional<double> top_h;
  // Beam search (num_beams > 1, transformers' _beam_search): hypotheses are
  // ranked by sum of log-probs / generated_length ** length_penalty (with
  // do_sample, beam sampling: the candidates are drawn, see beam_search.h);
  // early_stopping True stops an input once num_beams hypotheses are done,
  // False once the best running beam cannot beat the worst done one at its
  // current length, Never once it cannot at max length (length_penalty > 0).
  // num_return_sequences (<= num_beams) best hypotheses come back per prompt.
  // Decoding methods transformers 5.25 moved to Hub custom_generate repos
  // (constrained beam search, contrastive search, group beam search, DoLa):
  // what a generation_config.json asks of them. generate() refuses the
  // combinations that would run one, as transformers does without
  // trust_remote_code (kiln runs no Hub code); dola_layers with beams is
  // ignored with a warning, the rest of these settings silently, as there.
  struct HubMethods {
    std::string constrained;  // "force_words_ids" or "constraints" when one is set
    double penalty_alpha = 0;
    int64_t num_beam_groups = 1;
    bool dola_layers = false;
  };
  HubMethods hub_methods;
  enum class EarlyStopping { False, True, Never };
  int64_t num_beams = 1;
  double length_penalty = 1.0;
  EarlyStopping early_stopping = EarlyStopping::False;
  int64_t num_return_sequences = 1;
};

// "true"/"false"/"never" (any case; also a JSON bool's text): HF's early_stopping values.
GenerationConfig::EarlyStopping parse_early_stopping(const std::string& text);

// One id drawn from softmax(scores) (torch.multinomial(probs, 1) for one row):
// -inf scores are never drawn. All -inf, a NaN or a +inf is an error.
int64_t draw(const std::vector<float>& scores, std::mt19937_64& rng);

// The next id after `ids` (`generated` of them new, `eos` the call's EOS ids)
// from one row of logits, as transformers' _sample picks it (num_beams 1):
// the logits processors, then the greedy choice (the first of equal maxima)
// or, with do_sample, the warpers (min_tokens_to_keep 1) and a draw.
int64_t next_token(std::vector<float> logits, const GenerationConfig& g, std::mt19937_64& rng,
                   const std::vector<int64_t>& ids, int64_t generated = 0, const std::vector<int64_t>& eos = {});
// The same for a row whose encoder input is not its first ids (RowState::encoder_ids: an encoder-decoder's prompt).
int64_t next_token(std::vector<float> logits, const GenerationConfig& g, std::mt19937_64& rng, const RowState& row);

// A decoder-only LM (GPT2LMHeadModel, LlamaForCausalLM): continues each
// prompt (token ids) on its own; returns prompt + generated ids per prompt,
// ending at the first EOS (any of the config's). The cache holds prompt +
// max_new_tokens rounded up to `bucket` positions.
std::vector<std::vector<int64_t>> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& config);

// T5 (T5ForConditionalGeneration): the prompts (encoder input ids, with the
// </s> the tokenizer appends) are padded into one batch and encoded once; the
// decoder starts from decoder_start_token_id and every row advances one token
// per step; a row that produced EOS is fed pad_token_id from then on (as HF
// does) and generation ends when every row has finished or after
// max_new_tokens. Returns per prompt the generated decoder ids: HF's
// generate() output without its first column (decoder_start) and without the
// pads after EOS, so row i ends at its first EOS (included) or after
// max_new_tokens ids. The cache holds max_new_tokens rounded up to `bucket`
// decoder positions; the cross-attention keys/values are computed once.
// Greedy results do not depend on how prompts are batched.
std::vector<std::vector<int64_t>> generate(T5ForTask& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& config);

// With num_beams > 1 each overload returns num_return_sequences sequences per
// prompt (prompt-major, best first), in the same form; sampling without beams
// (do_sample) returns num_return_sequences draws per prompt, prompt-major.
//
// Either of the above by the model's type; a model without a language-model
// head (BERT, GPT2Model, T5EncoderModel, ...) is an error naming it.
std::vector<std::vector<int64_t>> generate(PreTrainedModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& config);

}  // namespace kiln::models
