#include "kiln/models/beam_search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/core/host_memory.h"
#include "kiln/runtime/context.h"

namespace kiln::models {

namespace {

constexpr float kNeg = -1.0e9f;  // transformers' "may not be chosen" offset

// Indices of the k largest values, largest first, as torch.topk picks them on the CPU (ATen's TopKImpl.h): the
// (value, index) pairs in index order go through std::partial_sort when k * 64 <= n, else std::nth_element and a
// std::sort of the first k - 1, both comparing values alone, so exactly equal values come out in the order those
// (libstdc++'s, as torch's) algorithms leave them, as transformers' beam search sees them.
std::vector<int64_t> top_k(const std::vector<float>& v, int64_t k) {
  using Pair = std::pair<double, int64_t>;  // torch's accumulation type for float
  std::vector<Pair> q(v.size());
  for (size_t i = 0; i < v.size(); ++i) q[i] = {v[i], static_cast<int64_t>(i)};
  k = std::min<int64_t>(k, static_cast<int64_t>(v.size()));
  std::vector<int64_t> idx;
  if (k == 0) return idx;
  const auto larger = [](const Pair& x, const Pair& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k * 64 <= static_cast<int64_t>(q.size())) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), larger);
  } else {
    std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), larger);
    std::sort(q.begin(), q.begin() + (k - 1), larger);
  }
  for (int64_t i = 0; i < k; ++i) idx.push_back(q[static_cast<size_t>(i)].second);
  return idx;
}

// torch.multinomial(softmax(scores), k) without replacement, then ordered by score (largest first, ties by the
// lower index): each candidate's key is E / p with E ~ Exp(1) and p its (unnormalized, float32) probability, and the
// k smallest keys win, which draws as k successive samples without replacement do. Candidates of probability 0
// come last, best score first.
std::vector<int64_t> sample_top_k(const std::vector<float>& scores, int64_t k, std::mt19937_64& rng) {
  const float m = *std::max_element(scores.begin(), scores.end());
  std::exponential_distribution<double> exponential(1.0);
  const double never = std::numeric_limits<double>::infinity();
  std::vector<double> key(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    const float p = m == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(scores[i] - m);
    key[i] = p > 0 ? exponential(rng) / p : never;
  }
  std::vector<int64_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min<int64_t>(k, static_cast<int64_t>(scores.size()));
  const auto before = [&](int64_t a, int64_t b) {
    const auto ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    if (key[ua] != key[ub]) return key[ua] < key[ub];
    return scores[ua] > scores[ub] || (scores[ua] == scores[ub] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)] ||
           (scores[static_cast<size_t>(a)] == scores[static_cast<size_t>(b)] && a < b);
  });
  return idx;
}

float length_norm(int64_t length, double penalty) {
  return static_cast<float>(std::pow(static_cast<double>(length), penalty));
}

}  // namespace

BeamSearch::BeamSearch(const std::vector<std::vector<int64_t>>& prefixes, std::vector<int64_t> eos,
                       const GenerationConfig& g, const StoppingCriteria* stopping)
    : g_(g), eos_(std::move(eos)), batch_(static_cast<int64_t>(prefixes.size())), beams_(g.num_beams),
      stopping_(stopping) {
  KILN_CHECK(batch_ > 0, "beam search: no inputs");
  prompt_len_ = cur_len_ = static_cast<int64_t>(prefixes[0].size());
  for (const auto& p : prefixes)
    KILN_CHECK(static_cast<int64_t>(p.size()) == prompt_len_, "beam search: prefixes of different lengths");
  max_length_ = prompt_len_ + g.max_new_tokens;
  for (const auto& p : prefixes)
    for (int64_t j = 0; j < beams_; ++j) {
      running_.push_back(p);
      finished_.push_back(p);
      // Only the first beam starts live, so the first step does not pick the same token num_beams times.
      running_scores_.push_back(j == 0 ? 0.0f : kNeg);
      finished_scores_.push_back(kNeg);
    }
  is_finished_.assign(running_.size(), 0);
  unsatisfied_.assign(static_cast<size_t>(batch_), 1);
  done_ = g.max_new_tokens == 0;
  if (g.do_sample) rngs_.assign(static_cast<size_t>(batch_), std::mt19937_64(g.seed));
}

// transformers' _get_top_k_continuations: the best continuations of input b over all its beams.
std::vector<BeamSearch::Candidate> BeamSearch::top_continuations(const std::vector<float>& logits, int64_t vocab,
                                                                 int64_t b, const std::vector<float>* unconditional) {
  std::vector<float> acc(static_cast<size_t>(beams_ * vocab));
  for (int64_t j = 0; j < beams_; ++j) {
    const int64_t row = b * beams_ + j;
    std::vector<float> lp(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
    log_softmax(lp.data(), vocab);
    const std::vector<int64_t>* encoder = encoder_inputs_.empty() ? nullptr : &encoder_inputs_[static_cast<size_t>(b)];
    std::vector<float> u;
    if (unconditional) u.assign(unconditional->begin() + row * vocab, unconditional->begin() + (row + 1) * vocab);
    apply_logits_processors(lp, {running_[static_cast<size_t>(row)], cur_len_ - prompt_len_, eos_, encoder,
                                 unconditional ? &u : nullptr}, g_);
    if (g_.do_sample) warp_logits(lp, g_, std::max<int64_t>(2, 1 + static_cast<int64_t>(eos_.size())));
    finish_scores(lp, g_);
    for (int64_t v = 0; v < vocab; ++v) acc[static_cast<size_t>(j * vocab + v)] = lp[v] + running_scores_[row];
  }
  const int64_t keep = std::max<int64_t>(2, 1 + static_cast<int64_t>(eos_.size())) * beams_;
  std::vector<Candidate> top;
  for (int64_t i : g_.do_sample ? sample_top_k(acc, keep, rngs_[static_cast<size_t>(b)]) : top_k(acc, keep)) {
    const int64_t token = i % vocab, parent = b * beams_ + i / vocab;
    bool stops = std::find(eos_.begin(), eos_.end(), token) != eos_.end() || cur_len_ + 1 >= max_length_;
    if (!stops && stopping_) {  // the stopping criteria see the candidate's ids
      std::vector<int64_t> seq = running_[static_cast<size_t>(parent)];
      seq.push_back(token);
      stops = stopping_->stops(seq, out_of_time_);
    }
    top.push_back({acc[static_cast<size_t>(i)], parent, token, stops});
  }
  return top;
}

// transformers' _update_finished_beams: the top num_beams candidates that stopped compete with the
// finished slots under the length penalty.
void BeamSearch::update_finished(int64_t b, const std::vector<Candidate>& top) {
  const size_t first = static_cast<size_t>(b * beams_), n = static_cast<size_t>(beams_);
  bool full = true;
  for (size_t j = 0; j < n; ++j) full = full && is_finished_[first + j];
  const float norm = length_norm(cur_len_ + 1 - prompt_len_, g_.length_penalty);
  std::vector<float> scores(finished_scores_.begin() + first, finished_scores_.begin() + first + n);
  std::vector<char> fin(is_finished_.begin() + first, is_finished_.begin() + first + n);
  for (size_t k = 0; k < top.size(); ++k) {
    const bool just_finished = top[k].stops && k < n;
    float s = top[k].score / norm;
    if (full && g_.early_stopping == GenerationConfig::EarlyStopping::True) s += kNeg;
    if (!unsatisfied_[static_cast<size_t>(b)]) s += kNeg;
    if (!just_finished) s += kNeg;
    scores.push_back(s);
    fin.push_back(just_finished);
  }
  std::vector<std::vector<int64_t>> seqs(finished_.begin() + first, finished_.begin() + first + n);
  for (const Candidate& c : top) {
    seqs.push_back(running_[static_cast<size_t>(c.parent)]);
    seqs.back().push_back(c.token);
  }
  const std::vector<int64_t> best = top_k(scores, beams_);
  for (size_t j = 0; j < n; ++j) {
    const auto k = static_cast<size_t>(best[j]);
    finished_[first + j] = seqs[k];
    finished_scores_[first + j] = scores[k];
    is_finished_[first + j] = fin[k];
  }
}

// transformers' _check_early_stop_heuristic for input b (after cur_len_ advanced).
bool BeamSearch::improvement_possible(int64_t b) const {
  const size_t first = static_cast<size_t>(b * beams_), n = static_cast<size_t>(beams_);
  const bool never = g_.early_stopping == GenerationConfig::EarlyStopping::Never && g_.length_penalty > 0;
  const int64_t best_length = never ? max_length_ - prompt_len_ : cur_len_ - prompt_len_;
  const float best_running = running_scores_[first] / length_norm(best_length, g_.length_penalty);
  const float worst = *std::min_element(finished_scores_.begin() + first, finished_scores_.begin() + first + n);
  for (size_t j = 0; j < n; ++j)
    if (best_running > (is_finished_[first + j] ? worst : kNeg)) return true;
  return false;
}

std::vector<int64_t> BeamSearch::step(const std::vector<float>& logits, int64_t vocab,
                                      const std::vector<float>* unconditional) {
  KILN_CHECK(!done_, "beam search: step after the search ended");
  KILN_CHECK(static_cast<int64_t>(logits.size()) == rows() * vocab, "beam search: logits have ", logits.size(),
             " values, expected ", rows() * vocab);
  std::vector<std::vector<int64_t>> next(running_.size());
  std::vector<float> next_scores(running_.size());
  std::vector<int64_t> parents(running_.size());
  out_of_time_ = stopping_ && stopping_->out_of_time();
  bool all_stop = true;
  for (int64_t b = 0; b < batch_; ++b) {
    const std::vector<Candidate> top = top_continuations(logits, vocab, b, unconditional);
    // _get_running_beams_for_next_iteration: the best that did not stop run on.
    std::vector<float> live(top.size());
    for (size_t k = 0; k < top.size(); ++k) {
      live[k] = top[k].score + (top[k].stops ? kNeg : 0.0f);
      all_stop = all_stop && top[k].stops;
    }
    const std::vector<int64_t> keep = top_k(live, beams_);
    for (int64_t j = 0; j < beams_; ++j) {
      const Candidate& c = top[static_cast<size_t>(keep[j])];
      const auto row = static_cast<size_t>(b * beams_ + j);
      next[row] = running_[static_cast<size_t>(c.parent)];
      next[row].push_back(c.token);
      next_scores[row] = live[static_cast<size_t>(keep[j])];
      parents[row] = c.parent;
    }
    update_finished(b, top);
  }
  running_ = std::move(next);
  running_scores_ = std::move(next_scores);
  ++cur_len_;
  bool any_unsatisfied = false;
  for (int64_t b = 0; b < batch_; ++b) {
    auto& u = unsatisfied_[static_cast<size_t>(b)];
    u = u && improvement_possible(b);
    any_unsatisfied = any_unsatisfied || u;
  }
  const bool all_finished = std::all_of(is_finished_.begin(), is_finished_.end(), [](char f) { return f != 0; });
  done_ = !any_unsatisfied || (all_finished && g_.early_stopping == GenerationConfig::EarlyStopping::True) || all_stop;
  return parents;
}

std::vector<std::vector<int64_t>> BeamSearch::results() const {
  if (cur_len_ == prompt_len_) {  // nothing generated: the prefixes
    std::vector<std::vector<int64_t>> out;
    for (int64_t b = 0; b < batch_; ++b)
      for (int64_t r = 0; r < g_.num_return_sequences; ++r) out.push_back(running_[static_cast<size_t>(b * beams_)]);
    return out;
  }
  std::vector<std::vector<int64_t>> out;
  for (int64_t b = 0; b < batch_; ++b)
    for (int64_t r = 0; r < g_.num_return_sequences; ++r) out.push_back(finished_[static_cast<size_t>(b * beams_ + r)]);
  return out;
}

// UnbatchedClassifierFreeGuidanceLogitsProcessor's unconditional pass, without a cache: the logits after each row of
// `rows` (all of one length), rows * V values.
std::vector<float> unconditional_logits(CausalLM& model, const std::vector<std::vector<int64_t>>& rows) {
  std::vector<int64_t> ids;
  for (const auto& r : rows) ids.insert(ids.end(), r.begin(), r.end());
  const auto R = static_cast<int64_t>(rows.size()), T = static_cast<int64_t>(rows.front().size());
  ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {R, T}, model.parameters().front().device(), "unconditional_ids");
  return slice(model.forward(in).logits, 1, T - 1, T).to_vector<float>();
}

namespace {

// Rows of x (first dim) picked by `rows`: a cache reordered by beam, an encoder output expanded per beam.
Tensor pick_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  Shape shape = x.shape();
  const int64_t n = shape[0];
  Tensor idx = Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}, x.device(), "beam_rows");
  shape[0] = static_cast<int64_t>(rows.size());
  return reshape(index_select(reshape(x, {n, -1}), idx), shape);
}

void reorder(std::vector<Tensor>& caches, const std::vector<int64_t>& rows) {
  for (Tensor& c : caches) c.assign(pick_rows(c, rows));
}

// Beam search holds each step's scores for every row (the model's logits,
// their log-softmax, the scores ranked and the host's copy) and a key/value
// cache per row: a num_beams past what the machine holds is refused before
// the first allocation rather than left to the out-of-memory killer.
void check_beam_memory(int64_t prompts, int64_t num_beams, int64_t vocab, double cache_floats_per_row) {
  const double rows = static_cast<double>(prompts) * static_cast<double>(num_beams);
  const double need = rows * (4.0 * static_cast<double>(vocab) + 2.0 * cache_floats_per_row) * sizeof(float);
  const double have = static_cast<double>(host_memory::physical_bytes());
  KILN_CHECK(have <= 0 || need < have, "generate: num_beams ", num_beams, " x ", prompts,
             " prompt(s) over a vocabulary of ", vocab, " need about ", std::ceil(need / 1e9),
             " GB of scores and caches, more than this machine's ", std::floor(have / 1e9),
             " GB: lower --num_beams (or --per_device_eval_batch_size)");
}

int64_t capacity(int64_t n, int64_t bucket) { return std::max<int64_t>(1, (n + bucket - 1) / bucket) * bucket; }

// One causal-LM prompt: num_beams rows advance together, each step's caches reordered by the rows continued.
std::vector<std::vector<int64_t>> beam_search_one(CausalLM& model, const std::vector<int64_t>& prompt,
                                                  const GenerationConfig& g, const std::vector<int64_t>& eos,
                                                  const StoppingCriteria& stopping) {
  const int64_t V = model.vocab_size(), N = g.num_beams, P = static_cast<int64_t>(prompt.size());
  int64_t L = capacity(P + g.max_new_tokens, g.bucket);
  if (auto max_positions = model.config().max_positions()) L = std::min(*max_positions, L);
  const CausalLM::CacheShape cs = model.cache_shape();
  check_beam_memory(1, N, V, g.use_cache ? 2.0 * cs.layers * cs.kv_heads * L * cs.head_dim : 0.0);
  Device dev = model.parameters().front().device();
  BeamSearch search({prompt}, eos, g, &stopping);
  // With guidance, each row's unconditional input: the prompt's last token and the tokens its row got since (the
  // rows are not reordered with the beams, as transformers keeps them).
  std::vector<std::vector<int64_t>> unconditional_rows(static_cast<size_t>(N), {prompt.back()});
  auto advance = [&](const std::vector<float>& logits) {
    if (g.guidance_scale == 1.0) return search.step(logits, V);
    const std::vector<float> u = unconditional_logits(model, unconditional_rows);
    std::vector<int64_t> parents = search.step(logits, V, &u);
    for (size_t r = 0; r < unconditional_rows.size(); ++r) unconditional_rows[r].push_back(search.running()[r].back());
    return parents;
  };
  if (!g.use_cache) {
    // Reference path: every running hypothesis through the whole model each step.
    while (!search.done()) {
      std::vector<int64_t> ids;
      for (const auto& seq : search.running()) ids.insert(ids.end(), seq.begin(), seq.end());
      const int64_t T = static_cast<int64_t>(search.running()[0].size());
      ModelInputs in;
      in.input_ids = Tensor::from_vector(ids, {N, T}, dev, "input_ids");
      Tensor last = slice(model.forward(in).logits, 1, T - 1, T);
      advance(last.to_vector<float>());
    }
    return search.results();
  }
  std::vector<Tensor> kc, vc;
  for (int64_t l = 0; l < cs.layers; ++l) {
    kc.push_back(zero_kv_cache({N, cs.kv_heads, L, cs.head_dim}, dev, "k_cache"));
    vc.push_back(zero_kv_cache({N, cs.kv_heads, L, cs.head_dim}, dev, "v_cache"));
  }
  // Each running row's tokens at positions [from, to), in one step from `from`.
  auto step = [&](int64_t from, int64_t to, std::optional<int64_t> prefill_length) {
    std::vector<int64_t> ids;
    for (const auto& seq : search.running()) ids.insert(ids.end(), seq.begin() + from, seq.begin() + to);
    return decode_ids(model, ids, N, from, prefill_length, kc, vc);
  };
  // The prompt in one step (every row alike), as transformers' first forward reads it.
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < N; ++r) rows.insert(rows.end(), prompt.begin(), prompt.end());
  Tensor logits = decode_prompt(model, rows, N, P, kc, vc);
  for (int64_t t = P; !search.done(); ++t) {
    const std::vector<int64_t> parents = advance(logits.to_vector<float>());
    if (search.done()) break;
    if (t == model.cache_recompute_position()) {  // every row's cache again, from its own tokens
      logits = step(0, t + 1, t + 1);
    } else {
      reorder(kc, parents);
      reorder(vc, parents);
      logits = step(t, t + 1, std::nullopt);
    }
  }
  return search.results();
}

}  // namespace

std::vector<std::vector<int64_t>> beam_search(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerationConfig& g) {
  const std::vector<int64_t> eos = g.eos_token_ids.empty() ? model.eos_token_ids() : g.eos_token_ids;
  model.eval();
  NoGradGuard no_grad;
  const StoppingCriteria stopping(g);
  std::vector<std::vector<int64_t>> out;
  for (const auto& prompt : prompts)
    for (auto& seq : beam_search_one(model, prompt, g, eos, stopping)) out.push_back(std::move(seq));
  return out;
}

std::vector<std::vector<int64_t>> beam_search(T5ForTask& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const GenerationConfig& g) {
  const T5Config& c = model.t5_config();
  const int64_t B = static_cast<int64_t>(prompts.size()), N = g.num_beams, R = B * N, V = c.vocab_size;
  if (B == 0) return {};
  check_beam_memory(B, N, V, 0.0);
  int64_t S = 0;
  for (const auto& p : prompts) S = std::max(S, static_cast<int64_t>(p.size()));
  // The prompts padded on the right, encoded once; each row of the encoder output and mask repeated per beam.
  std::vector<int64_t> ids(static_cast<size_t>(B * S), c.pad_token_id), mask(static_cast<size_t>(B * S), 0), rows;
  for (int64_t b = 0; b < B; ++b) {
    for (size_t j = 0; j < prompts[b].size(); ++j) {
      ids[b * S + j] = prompts[b][j];
      mask[b * S + j] = 1;
    }
    rows.insert(rows.end(), static_cast<size_t>(N), b);
  }
  Device dev = model.parameters().front().device();
  model.eval();
  NoGradGuard no_grad;
  Tensor prompt_mask = Tensor::from_vector(mask, {B, S}, dev, "attention_mask");
  Tensor enc = pick_rows(model.encode(Tensor::from_vector(ids, {B, S}, dev, "input_ids"), prompt_mask), rows);
  Tensor attention_mask = pick_rows(prompt_mask, rows);
  const StoppingCriteria stopping(g);
  BeamSearch search(std::vector<std::vector<int64_t>>(static_cast<size_t>(B), {c.decoder_start_token_id}),
                    g.eos_token_ids.empty() ? std::vector<int64_t>{c.eos_token_id} : g.eos_token_ids, g, &stopping);
  search.set_encoder_inputs(prompts);
  T5DecoderCache cache;
  if (g.use_cache) cache = model.start_decoding(enc, attention_mask, capacity(g.max_new_tokens, g.bucket));
  mark_step(dev);  // the encoder (and the cross-attention keys/values), once
  for (int64_t t = 0; !search.done(); ++t) {
    std::vector<float> logits;
    if (g.use_cache) {
      std::vector<int64_t> last;
      for (const auto& seq : search.running()) last.push_back(seq.back());
      Tensor token = Tensor::from_vector(last, {R, 1}, dev, "decoder_token");
      Tensor pos = Tensor::from_vector(std::vector<int64_t>{t}, {}, dev, "decoder_position");
      Tensor out = model.decode_step(token, pos, cache);
      mark_step(dev);
      logits = out.to_vector<float>();
    } else {  // reference path: every hypothesis through the whole decoder
      std::vector<int64_t> dec;
      for (const auto& seq : search.running()) dec.insert(dec.end(), seq.begin(), seq.end());
      Tensor out = model.decode(Tensor::from_vector(dec, {R, t + 1}, dev, "decoder_input_ids"), {}, enc, attention_mask);
      logits = slice(out, 1, t, t + 1).to_vector<float>();
    }
    const std::vector<int64_t> parents = search.step(logits, V);
    if (g.use_cache && !search.done()) {
      reorder(cache.self_k, parents);
      reorder(cache.self_v, parents);
    }
  }
  // Without the decoder start, as generate(T5) returns its ids.
  std::vector<std::vector<int64_t>> out = search.results();
  for (auto& seq : out) seq.erase(seq.begin());
  return out;
}

}  // namespace kiln::models
