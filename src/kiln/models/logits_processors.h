#pragma once
// transformers' logits processors and sampling warpers on one row of scores,
// in the order its _get_logits_processor builds them:
//   UnbatchedClassifierFreeGuidance, SequenceBias, EncoderRepetitionPenalty, RepetitionPenalty, NoRepeatNGram,
//   EncoderNoRepeatNGram, NoBadWords, MinLength /
//   MinNewTokensLength, ForcedBOS, ForcedEOS, InfNanRemove,
//   ExponentialDecayLengthPenalty, SuppressTokens, SuppressTokensAtBegin;
//   with do_sample the warpers Temperature, TopK, TopP, MinP, Typical,
//   Epsilon, Eta; LogitNormalization (renormalize_logits) last.
// Greedy decoding and plain sampling apply them to the model's logits, beam
// search and beam sampling to their log-softmax. The arithmetic is float32
// with sums accumulated in double, as torch computes them on the CPU.
#include <cstdint>
#include <vector>

namespace kiln::models {

struct GenerationConfig;

// Where a row stands: its ids so far (a decoder-only model's prompt and
// output, an encoder-decoder's decoder input, its start token first), how
// many of them were generated, and the ids that end a sequence.
// encoder_ids: an encoder-decoder's prompt (the encoder's input), which the
// encoder_* processors read; null for a decoder-only model, whose prompt is
// the ids before the generated ones.
struct RowState {
  const std::vector<int64_t>& ids;
  int64_t generated;
  const std::vector<int64_t>& eos;
  const std::vector<int64_t>* encoder_ids = nullptr;
  // With guidance_scale: the row's unconditional logits (the vocabulary's).
  const std::vector<float>* unconditional = nullptr;
};

// Every logits processor g asks for (not the warpers), in transformers' order.
// min_new_tokens is the minimum already resolved from min_length (generate()
// does that). Transformers counts the input (its input_ids_seq_length) over a
// padded batch; here each row counts its own prompt, so a row's result does
// not depend on the prompts it is batched with.
void apply_logits_processors(std::vector<float>& scores, const RowState& row, const GenerationConfig& g);

// HF's RepetitionPenaltyLogitsProcessor and NoRepeatNGramLogitsProcessor on
// one row of logits, given the ids so far.
void process_logits(std::vector<float>& logits, const std::vector<int64_t>& ids, const GenerationConfig& g);

// HF's MinNewTokensLengthLogitsProcessor on one row of scores: while fewer
// than g.min_new_tokens ids have been generated, the `eos` ids' scores are
// -inf (ids outside the row are skipped).
void suppress_early_eos(std::vector<float>& scores, int64_t generated, const std::vector<int64_t>& eos,
                        const GenerationConfig& g);

// HF's sampling warpers on one row of processed scores: plain sampling's
// logits (min_tokens_to_keep 1) or beam sampling's log-probs (1 + the number
// of EOS ids, at least 2). The scores are divided by temperature; those below
// the top_k-th largest go (ties with it stay); then, in ascending order (equal
// scores by index), those whose cumulative probability is at most 1 - top_p,
// so that of tokens tied at the cut the higher ids stay; then (MinPLogitsWarper)
// those whose probability is below min_p times the largest; then
// (TypicalLogitsWarper) those whose -log p is further from the entropy than
// the tokens, closest first, that reach a mass of typical_p (ties with the
// last stay); then (EpsilonLogitsWarper) those of probability below
// epsilon_cutoff and (EtaLogitsWarper) below min(eta_cutoff,
// sqrt(eta_cutoff) * exp(-entropy)), except those tied with the
// min_tokens_to_keep-th largest. Each filter keeps at least min_tokens_to_keep;
// a removed score becomes -inf. renormalize_logits is not a warper (see
// finish_scores).
void warp_logits(std::vector<float>& scores, const GenerationConfig& g, int64_t min_tokens_to_keep);

// log_softmax of one row, in float32 as torch takes it.
void log_softmax(float* x, int64_t n);

// With renormalize_logits, LogitNormalization: the row's log_softmax (last,
// after the warpers).
void finish_scores(std::vector<float>& scores, const GenerationConfig& g);

// The processors' settings against the vocabulary, as transformers refuses
// them when it builds or first applies them: sequence_bias and bad_words_ids
// ids in [0, vocab_size) and no empty sequence, forced BOS/EOS ids in range,
// not every forced id suppressed, a finite decay factor, and with do_sample
// typical_p in (0, 1], epsilon_cutoff and eta_cutoff in [0, 1). Ids of
// suppress_tokens and begin_suppress_tokens outside the vocabulary match
// nothing, as in transformers.
void check_logits_processors(const GenerationConfig& g, int64_t vocab_size);

}  // namespace kiln::models
