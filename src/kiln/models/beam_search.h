#pragma once
// Beam search as transformers' GenerationMixin._beam_search computes it, on
// the host: the model side (a causal LM's or T5's decode steps, the cache
// reordered by beam) is in beam_search.cpp's drivers, the bookkeeping here.
//
// Per input, num_beams running hypotheses (row b*num_beams + j) and
// num_beams finished slots. Each step takes every row's next-token logits,
// log-softmaxes them, applies the logits processors (repetition penalty,
// no-repeat n-grams) against the row's ids, adds the row's score and keeps the
// best (1 + #eos, at least 2) * num_beams continuations of the input. Of
// these, those ending in EOS or at max length that rank among the first
// num_beams become finished candidates scored score / length ** length_penalty
// (length: generated ids, EOS included); the best num_beams unfinished ones
// run on. Scores are float32 as in transformers, -1e9 marks what may not be
// chosen, and exactly tied scores are ordered as torch.topk orders them on
// the CPU (the same selection algorithm).
//
// With do_sample (beam sampling, transformers' _beam_search under
// do_sample=True) the processed log-probs also pass HF's warpers
// (temperature, top_k, top_p; warp_logits, keeping at least 1 + #eos tokens)
// and the continuations are not the best ones but drawn without replacement
// from the softmax of their accumulated scores (torch.multinomial), then
// ranked by score. Each input draws from its own generator, seeded with
// GenerationConfig::seed, so its beams do not depend on the batch it runs in.
// When fewer candidates than needed have a nonzero probability (a small
// top_k), the rest are the best of those without, as torch.multinomial also
// fills with zero-probability categories; their scores (-inf) never win.
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kiln/models/generation.h"
#include "kiln/models/stopping_criteria.h"

namespace kiln::models {

class BeamSearch {
 public:
  // prefixes: each input's ids so far (a causal LM's prompt, T5's decoder
  // start); all of one length, the decoder prompt length.
  // `stopping` (stop strings, max_time; the call's, outliving the search)
  // ends a candidate as EOS does.
  BeamSearch(const std::vector<std::vector<int64_t>>& prefixes, std::vector<int64_t> eos, const GenerationConfig& g,
             const StoppingCriteria* stopping = nullptr);
  // An encoder-decoder's prompts, one per input, which the encoder_*
  // processors read (a decoder-only model's are its prefixes).
  void set_encoder_inputs(std::vector<std::vector<int64_t>> prompts) { encoder_inputs_ = std::move(prompts); }

  // logits: rows() * vocab values, row r the next-token logits of running
  // hypothesis r. Returns, per new running row, the row it continues (the
  // cache reorder index).
  // With guidance_scale, `unconditional` holds each row's unconditional
  // logits (rows() * vocab).
  std::vector<int64_t> step(const std::vector<float>& logits, int64_t vocab,
                            const std::vector<float>* unconditional = nullptr);
  bool done() const { return done_; }
  int64_t rows() const { return static_cast<int64_t>(running_.size()); }
  // Every running hypothesis's ids (prefix + generated), row by row.
  const std::vector<std::vector<int64_t>>& running() const { return running_; }
  // num_return_sequences hypotheses per input, best first, each prefix +
  // generated ids (ending at its EOS or at max length).
  std::vector<std::vector<int64_t>> results() const;

 private:
  struct Candidate {
    float score;
    int64_t parent;  // running row
    int64_t token;
    bool stops;
  };
  std::vector<Candidate> top_continuations(const std::vector<float>& logits, int64_t vocab, int64_t b,
                                           const std::vector<float>* unconditional);
  void update_finished(int64_t b, const std::vector<Candidate>& top);
  bool improvement_possible(int64_t b) const;

  GenerationConfig g_;
  std::vector<int64_t> eos_;
  int64_t batch_, beams_, prompt_len_, max_length_, cur_len_;
  std::vector<std::vector<int64_t>> running_, finished_;
  std::vector<float> running_scores_, finished_scores_;
  std::vector<char> is_finished_, unsatisfied_;  // per slot; per input
  std::vector<std::mt19937_64> rngs_;            // per input, beam sampling's draws
  const StoppingCriteria* stopping_ = nullptr;
  bool out_of_time_ = false;  // this step's max_time verdict, one for every candidate
  std::vector<std::vector<int64_t>> encoder_inputs_;
  bool done_ = false;
};

// The beam-search drivers generate() dispatches to when num_beams > 1; same
// inputs and outputs as generate(), with num_return_sequences sequences per
// prompt (prompt-major).
std::vector<std::vector<int64_t>> beam_search(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerationConfig& g);

// guidance_scale's unconditional pass (UnbatchedClassifierFreeGuidanceLogitsProcessor), without a cache: the
// logits after each of `rows` (all of one length), rows * vocab values.
std::vector<float> unconditional_logits(CausalLM& model, const std::vector<std::vector<int64_t>>& rows);
std::vector<std::vector<int64_t>> beam_search(T5ForTask& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerationConfig& g);

}  // namespace kiln::models
