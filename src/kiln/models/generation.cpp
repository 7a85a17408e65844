#include "kiln/models/generation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <string>

#include "kiln/core/error.h"
#include "kiln/models/beam_search.h"
#include "kiln/models/stopping_criteria.h"
#include "kiln/models/token_ids.h"
#include "kiln/runtime/context.h"

namespace kiln::models {

namespace {

// transformers' GenerationConfig.validate for the beam settings.
void check_beam_config(const GenerationConfig& g) {
  KILN_CHECK(g.num_beams >= 1, "generate: num_beams must be >= 1, got ", g.num_beams);
  KILN_CHECK(std::isfinite(g.length_penalty), "generate: length_penalty must be a finite number, got ", g.length_penalty);
  KILN_CHECK(g.num_return_sequences >= 1, "generate: num_return_sequences must be >= 1, got ", g.num_return_sequences);
  if (g.num_beams == 1)
    KILN_CHECK(g.do_sample || g.num_return_sequences == 1, "generate: greedy decoding without beam search returns one "
               "sequence per prompt, got num_return_sequences ", g.num_return_sequences,
               " (sample with do_sample, or search with num_beams >= num_return_sequences)");
  else
    KILN_CHECK(g.num_return_sequences <= g.num_beams, "generate: num_return_sequences (", g.num_return_sequences,
               ") has to be smaller or equal to num_beams (", g.num_beams, ")");
}

// Sampling without beams and num_return_sequences R: each prompt R times
// over, drawn one after another, as transformers expands the inputs.
std::vector<std::vector<int64_t>> each_repeated(const std::vector<std::vector<int64_t>>& prompts, int64_t times) {
  std::vector<std::vector<int64_t>> out;
  for (const auto& p : prompts)
    for (int64_t r = 0; r < times; ++r) out.push_back(p);
  return out;
}
GenerationConfig one_sequence(GenerationConfig g) {
  g.num_return_sequences = 1;
  return g;
}

// GenerationConfig.get_generation_mode: a method transformers 5.25 moved to a Hub repo is refused (it would need
// trust_remote_code); dola_layers with beams is ignored there with a warning.
void check_hub_methods(const GenerationConfig& g) {
  const GenerationConfig::HubMethods& h = g.hub_methods;
  auto refuse = [](const std::string& method, const std::string& repo, const std::string& why, const char* fix) {
    throw Error("generate: " + why + " asks for " + method + ", which transformers 5.25 moved to the Hub repo " +
                "transformers-community/" + repo + " and refuses to run without trust_remote_code=True; kiln runs " +
                "no Hub code: " + fix);
  };
  if (!h.constrained.empty())
    refuse("constrained beam search", "constrained-beam-search", h.constrained + " (set)",
           "remove it from generation_config.json (bad_words_ids and sequence_bias steer tokens instead)");
  if (g.num_beams == 1 && !g.do_sample && g.top_k > 1 && h.penalty_alpha > 0)
    refuse("contrastive search", "contrastive-search",
           detail::concat("penalty_alpha ", h.penalty_alpha, " with top_k ", g.top_k, " and greedy decoding"),
           "remove penalty_alpha from generation_config.json (or sample, or search with beams)");
  if (g.num_beams > 1 && h.num_beam_groups > 1)
    refuse("group beam search", "group-beam-search", detail::concat("num_beam_groups ", h.num_beam_groups),
           "remove num_beam_groups and diversity_penalty from generation_config.json");
  if (h.dola_layers && g.num_beams == 1)
    refuse("DoLa decoding", "dola", "dola_layers", "remove dola_layers from generation_config.json");
  static std::once_flag warned;
  if (h.dola_layers)
    std::call_once(warned, [] {
      std::fprintf(stderr, "kiln: warning: dola_layers only applies to greedy decoding and sampling (DoLa); "
                   "ignored with beam search, as transformers ignores it\n");
    });
}

void check_config(const GenerationConfig& g) {
  check_hub_methods(g);
  KILN_CHECK(g.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", g.max_new_tokens);
  KILN_CHECK(g.bucket > 0, "generate: bucket must be > 0, got ", g.bucket);
  KILN_CHECK(g.repetition_penalty > 0 && std::isfinite(g.repetition_penalty),
             "generate: repetition_penalty must be a positive number, got ", g.repetition_penalty);
  KILN_CHECK(g.no_repeat_ngram_size >= 0, "generate: no_repeat_ngram_size must be >= 0 (0 = off), got ",
             g.no_repeat_ngram_size);
  KILN_CHECK(g.min_new_tokens >= 0, "generate: min_new_tokens must be >= 0, got ", g.min_new_tokens);
  KILN_CHECK(!g.min_length || *g.min_length >= 0, "generate: min_length must be >= 0, got ", g.min_length.value_or(0));
  KILN_CHECK(g.encoder_repetition_penalty > 0 && std::isfinite(g.encoder_repetition_penalty),
             "generate: encoder_repetition_penalty must be a positive number, got ", g.encoder_repetition_penalty);
  KILN_CHECK(std::isfinite(g.guidance_scale), "generate: guidance_scale must be a finite number, got ",
             g.guidance_scale);
  KILN_CHECK(g.encoder_no_repeat_ngram_size >= 0, "generate: encoder_no_repeat_ngram_size must be >= 0 (0 = off), got ",
             g.encoder_no_repeat_ngram_size);
  check_stopping_criteria(g);
  check_beam_config(g);
  if (!g.do_sample) return;
  KILN_CHECK(g.temperature > 0, "generate: temperature must be > 0, got ", g.temperature);
  KILN_CHECK(g.top_k >= 0, "generate: top_k must be >= 0 (0 = off), got ", g.top_k);
  // TopPLogitsWarper's range: 0 keeps only the most likely id (greedy under the other warpers).
  KILN_CHECK(g.top_p >= 0 && g.top_p <= 1, "generate: top_p must be in [0, 1], got ", g.top_p);
  KILN_CHECK(g.min_p >= 0 && g.min_p <= 1, "generate: min_p must be in [0, 1], got ", g.min_p);
}

// Every prompt non-empty and made of ids the embedding has; the processors' settings valid for it.
void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab_size, const GenerationConfig& g) {
  for (size_t i = 0; i < prompts.size(); ++i) KILN_CHECK(!prompts[i].empty(), "generate: prompt ", i, " is empty");
  check_logits_processors(g, vocab_size);
  if (auto bad = id_outside_vocabulary(prompts, vocab_size))
    throw Error(detail::concat("generate: prompt ", bad->row, " token ", bad->position, " is id ", bad->id,
                               ", outside the vocabulary [0, ", vocab_size, ")"));
}

// Each prompt + max_new_tokens within the model's positions.
void check_positions(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts, const GenerationConfig& g) {
  const std::optional<int64_t> max_positions = model.config().max_positions();
  if (!max_positions) return;
  for (const auto& prompt : prompts)
    KILN_CHECK(static_cast<int64_t>(prompt.size()) + g.max_new_tokens <= *max_positions, "generate: prompt (",
               prompt.size(), " tokens) + max_new_tokens (", g.max_new_tokens, ") exceeds the model's ", *max_positions,
               " positions");
}

// Cache capacity: n positions rounded up to the bucket.
int64_t capacity(int64_t n, int64_t bucket) { return std::max<int64_t>(1, (n + bucket - 1) / bucket) * bucket; }

}  // namespace

namespace {

void check_drawable(bool ok, size_t n) {
  KILN_CHECK(ok, "generate: no token can be sampled: the ", n,
             " scores left by the logits processors and warpers are all -inf, or one is NaN or +inf",
             " (transformers' multinomial fails the same way)");
}

}  // namespace

int64_t draw(const std::vector<float>& scores, std::mt19937_64& rng) {
  float m = -std::numeric_limits<float>::infinity();
  for (float x : scores) m = std::max(m, x);
  std::vector<double> p(scores.size());
  double total = 0;
  for (size_t i = 0; i < scores.size(); ++i) total += p[i] = std::exp(static_cast<double>(scores[i]) - m);
  check_drawable(std::isfinite(total) && total > 0, scores.size());
  double r = std::uniform_real_distribution<double>(0, total)(rng);
  int64_t last = 0;  // the last id with a probability: where rounding leaves r after the walk
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = static_cast<int64_t>(i);
    if ((r -= p[i]) < 0) return last;
  }
  return last;
}

int64_t next_token(std::vector<float> logits, const GenerationConfig& g, std::mt19937_64& rng,
                   const std::vector<int64_t>& ids, int64_t generated, const std::vector<int64_t>& eos) {
  return next_token(std::move(logits), g, rng, {ids, generated, eos});
}

int64_t next_token(std::vector<float> logits, const GenerationConfig& g, std::mt19937_64& rng, const RowState& row) {
  apply_logits_processors(logits, row, g);
  if (!g.do_sample) {
    finish_scores(logits, g);
    return std::max_element(logits.begin(), logits.end()) - logits.begin();
  }
  // The warpers sort: a NaN (a broken model) is reported before it can scramble the order.
  check_drawable(std::none_of(logits.begin(), logits.end(), [](float x) { return std::isnan(x); }), logits.size());
  warp_logits(logits, g, 1);
  finish_scores(logits, g);
  return draw(logits, rng);
}

GenerationConfig::EarlyStopping parse_early_stopping(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (t == "true") return GenerationConfig::EarlyStopping::True;
  if (t == "false") return GenerationConfig::EarlyStopping::False;
  if (t == "never") return GenerationConfig::EarlyStopping::Never;
  throw Error("early_stopping must be true, false or \"never\" (transformers' values), got '" + text + "'");
}

// max_length and min_length (HF's total lengths) as the max_new_tokens and
// min_new_tokens they leave: after the longest prompt for a decoder-only
// model, after the start token for an encoder-decoder. A prompt that fills
// max_length is an error, as in transformers.
GenerationConfig with_lengths(const GenerationConfig& g, const std::vector<std::vector<int64_t>>& prompts,
                              bool encoder_decoder) {
  GenerationConfig r = g;
  int64_t used = 1;
  if (!encoder_decoder)
    for (const auto& p : prompts) used = std::max(used, static_cast<int64_t>(p.size()));
  if (g.min_length) {  // (min_new_tokens, when given, takes precedence, as in transformers)
    if (g.min_new_tokens == 0) r.min_new_tokens = std::max<int64_t>(0, *g.min_length - used);
    r.min_length.reset();
  }
  if (!g.max_length) return r;
  KILN_CHECK(used < *g.max_length, "generate: the ", encoder_decoder ? "decoder's start token" : "prompt", " (", used,
             used == 1 ? " token" : " tokens", ") already fills max_length (", *g.max_length,
             "): raise max_length, or give max_new_tokens instead");
  r.max_new_tokens = *g.max_length - used;
  r.max_length.reset();
  return r;
}

std::vector<std::vector<int64_t>> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& g) {
  KILN_CHECK(model.can_generate(), "generate: ", model.architecture(), " has no language-model head");
  check_config(g);
  if (g.max_length || g.min_length) return generate(model, prompts, with_lengths(g, prompts, false));
  if (g.num_beams == 1 && g.num_return_sequences > 1)
    return generate(model, each_repeated(prompts, g.num_return_sequences), one_sequence(g));
  const int64_t V = model.vocab_size();
  check_prompts(prompts, V, g);
  if (g.num_beams > 1) {
    check_positions(model, prompts, g);
    return beam_search(model, prompts, g);
  }
  const std::vector<int64_t> eos = g.eos_token_ids.empty() ? model.eos_token_ids() : g.eos_token_ids;
  auto ends = [&](int64_t id) { return std::find(eos.begin(), eos.end(), id) != eos.end(); };
  const std::optional<int64_t> max_positions = model.config().max_positions();
  Device dev = model.parameters().front().device();
  model.eval();
  NoGradGuard no_grad;
  std::mt19937_64 rng(g.seed);
  const StoppingCriteria stopping(g);
  // The next id after seq (the prompt and `generated` new ids); with guidance, the unconditional pass on the
  // prompt's last token and the new ids.
  auto next_token_of = [&](std::vector<float> logits, const std::vector<int64_t>& seq, int64_t generated) {
    if (g.guidance_scale == 1.0) return next_token(std::move(logits), g, rng, {seq, generated, eos});
    const std::vector<float> u = unconditional_logits(
        model, {std::vector<int64_t>(seq.end() - generated - 1, seq.end())});
    return next_token(std::move(logits), g, rng, {seq, generated, eos, nullptr, &u});
  };
  std::vector<std::vector<int64_t>> out;
  for (const auto& prompt : prompts) {
    const int64_t need = static_cast<int64_t>(prompt.size()) + g.max_new_tokens;
    check_positions(model, {prompt}, g);
    std::vector<int64_t> seq = prompt;
    if (!g.use_cache) {
      // Reference path: the whole sequence through the model every step.
      for (int64_t n = 0; n < g.max_new_tokens; ++n) {
        ModelInputs in;
        in.input_ids = Tensor::from_vector(seq, {1, static_cast<int64_t>(seq.size())}, dev, "input_ids");
        Tensor logits = model.forward(in).logits;
        auto all = logits.to_vector<float>();
        std::vector<float> last(all.end() - V, all.end());
        const auto generated = static_cast<int64_t>(seq.size() - prompt.size());
        int64_t next = next_token_of(std::move(last), seq, generated);
        seq.push_back(next);
        if (ends(next) || stopping.stops(seq)) break;
      }
      out.push_back(std::move(seq));
      continue;
    }
    int64_t L = capacity(need, g.bucket);
    if (max_positions) L = std::min(*max_positions, L);
    const CausalLM::CacheShape cs = model.cache_shape();
    std::vector<Tensor> kc, vc;
    for (int64_t l = 0; l < cs.layers; ++l) {
      kc.push_back(zero_kv_cache({1, cs.kv_heads, L, cs.head_dim}, dev, "k_cache"));
      vc.push_back(zero_kv_cache({1, cs.kv_heads, L, cs.head_dim}, dev, "v_cache"));
    }
    // seq[from, to) at positions from.. in one step: the logits of its last.
    auto step = [&](int64_t from, int64_t to, std::optional<int64_t> prefill_length) {
      return decode_ids(model, std::vector<int64_t>(seq.begin() + from, seq.begin() + to), 1, from, prefill_length,
                        kc, vc);
    };
    // The prompt in one step, as transformers' first forward reads it, then
    // a step per new token. The last token is not fed: nothing reads its
    // step, which would still be queued when generate returns (and could
    // outlive the process's oneDNN at exit).
    const int64_t P = static_cast<int64_t>(prompt.size());
    if (P < need) {
      Tensor logits = decode_prompt(model, prompt, 1, P, kc, vc);
      for (;;) {
        int64_t next = next_token_of(logits.to_vector<float>(), seq, static_cast<int64_t>(seq.size()) - P);
        seq.push_back(next);
        const auto t = static_cast<int64_t>(seq.size()) - 1;
        if (ends(next) || stopping.stops(seq) || t + 1 >= need) break;
        // Past a longrope model's original length, the whole cache again (Phi-3).
        if (t == model.cache_recompute_position()) logits = step(0, t + 1, t + 1);
        else logits = step(t, t + 1, std::nullopt);
      }
    }
    out.push_back(std::move(seq));
  }
  return out;
}

std::vector<std::vector<int64_t>> generate(T5ForTask& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& g) {
  KILN_CHECK(model.can_generate(), "generate: ", model.architecture(),
             " is an encoder without a decoder; generation needs T5ForConditionalGeneration");
  check_config(g);
  KILN_CHECK(g.guidance_scale == 1.0, "generate: guidance_scale ", g.guidance_scale, " needs a decoder-only model: its "
             "unconditional pass continues the prompt's last token, which an encoder-decoder cannot run (transformers "
             "fails there too)");
  if (g.max_length || g.min_length) return generate(model, prompts, with_lengths(g, prompts, true));
  if (g.num_beams == 1 && g.num_return_sequences > 1)
    return generate(model, each_repeated(prompts, g.num_return_sequences), one_sequence(g));
  const T5Config& c = model.t5_config();
  check_prompts(prompts, c.vocab_size, g);
  if (g.num_beams > 1) return beam_search(model, prompts, g);
  const int64_t B = static_cast<int64_t>(prompts.size()), V = c.vocab_size;
  std::vector<std::vector<int64_t>> out(prompts.size());
  if (B == 0 || g.max_new_tokens == 0) return out;
  const std::vector<int64_t> eos = g.eos_token_ids.empty() ? std::vector<int64_t>{c.eos_token_id} : g.eos_token_ids;
  int64_t S = 0;
  for (const auto& p : prompts) S = std::max(S, static_cast<int64_t>(p.size()));
  // The prompts padded on the right: ids [B,S] and their mask.
  std::vector<int64_t> ids(static_cast<size_t>(B * S), c.pad_token_id), mask(static_cast<size_t>(B * S), 0);
  for (int64_t b = 0; b < B; ++b)
    for (size_t j = 0; j < prompts[b].size(); ++j) {
      ids[b * S + j] = prompts[b][j];
      mask[b * S + j] = 1;
    }
  Device dev = model.parameters().front().device();
  model.eval();
  NoGradGuard no_grad;
  Tensor input_ids = Tensor::from_vector(ids, {B, S}, dev, "input_ids");
  Tensor attention_mask = Tensor::from_vector(mask, {B, S}, dev, "attention_mask");

  // One decoder position t for every row, fed [B] ids -> logits [B*V] on the host.
  std::function<std::vector<float>(const std::vector<int64_t>&, int64_t)> step;
  T5DecoderCache cache;
  Tensor enc;
  std::vector<std::vector<int64_t>> fed_so_far(prompts.size());
  if (g.use_cache) {
    cache = model.start_decoding(model.encode(input_ids, attention_mask), attention_mask,
                                 capacity(g.max_new_tokens, g.bucket));
    mark_step(dev);  // the encoder and the cross-attention keys/values, once
    step = [&](const std::vector<int64_t>& fed, int64_t t) {
      Tensor token = Tensor::from_vector(fed, {B, 1}, dev, "decoder_token");
      Tensor pos = Tensor::from_vector(std::vector<int64_t>{t}, {}, dev, "decoder_position");
      Tensor logits = model.decode_step(token, pos, cache);
      mark_step(dev);
      return logits.to_vector<float>();
    };
  } else {
    // Reference path: the whole decoder input through the decoder every step.
    enc = model.encode(input_ids, attention_mask);
    mark_step(dev);
    step = [&](const std::vector<int64_t>& fed, int64_t t) {
      std::vector<int64_t> dec;
      for (int64_t b = 0; b < B; ++b) {
        fed_so_far[b].push_back(fed[b]);
        dec.insert(dec.end(), fed_so_far[b].begin(), fed_so_far[b].end());
      }
      Tensor logits = model.decode(Tensor::from_vector(dec, {B, t + 1}, dev, "decoder_input_ids"), {}, enc, attention_mask);
      return slice(logits, 1, t, t + 1).to_vector<float>();
    };
  }
  std::mt19937_64 rng(g.seed);
  std::vector<int64_t> fed(prompts.size(), c.decoder_start_token_id);
  std::vector<bool> done(prompts.size(), false);
  const StoppingCriteria stopping(g);
  for (int64_t t = 0; t < g.max_new_tokens; ++t) {
    std::vector<float> logits = step(fed, t);
    const bool out_of_time = stopping.out_of_time();
    KILN_CHECK(static_cast<int64_t>(logits.size()) == B * V, "generate: logits have ", logits.size(),
               " values, expected ", B * V);
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) {
        fed[b] = c.pad_token_id;
        continue;
      }
      std::vector<int64_t> so_far = {c.decoder_start_token_id};
      so_far.insert(so_far.end(), out[b].begin(), out[b].end());
      std::vector<float> row(logits.begin() + b * V, logits.begin() + (b + 1) * V);
      const int64_t generated = static_cast<int64_t>(out[b].size());
      int64_t next = next_token(std::move(row), g, rng, {so_far, generated, eos, &prompts[b]});
      out[b].push_back(next);
      fed[b] = next;
      so_far.push_back(next);
      done[b] = std::find(eos.begin(), eos.end(), next) != eos.end() || stopping.stops(so_far, out_of_time);
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  return out;
}

std::vector<std::vector<int64_t>> generate(PreTrainedModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& g) {
  if (auto* lm = dynamic_cast<CausalLM*>(&model); lm && lm->can_generate())
    return generate(*lm, prompts, g);
  if (auto* t5 = dynamic_cast<T5ForTask*>(&model); t5 && t5->can_generate())
    return generate(*t5, prompts, g);
  throw Error("generate: " + model.architecture() +
              " cannot generate text; generation needs GPT2LMHeadModel, a Llama-family *ForCausalLM (Llama, Mistral, "
              "Qwen2, Qwen3, Gemma, Gemma2, Phi3) or T5ForConditionalGeneration");
}

}  // namespace kiln::models
