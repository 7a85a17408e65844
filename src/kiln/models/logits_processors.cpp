#include "kiln/models/logits_processors.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "kiln/core/error.h"
#include "kiln/models/generation.h"

namespace kiln::models {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool in_row(int64_t id, const std::vector<float>& scores) {
  return id >= 0 && id < static_cast<int64_t>(scores.size());
}

// Whether `ids` ends with seq's ids but its last (a prefix longer than the ids never matches).
bool completes(const std::vector<int64_t>& seq, const std::vector<int64_t>& ids) {
  const size_t prefix = seq.size() - 1;
  return prefix <= ids.size() &&
         std::equal(seq.begin(), seq.end() - 1, ids.end() - static_cast<std::ptrdiff_t>(prefix));
}

// SequenceBiasLogitsProcessor (NoBadWordsLogitsProcessor with -inf biases): one bias per sequence, a repeated
// sequence's last, kept in the place of its first; each id's bias summed in float32 as transformers does (the
// single-id biases first, then the longer sequences grouped by length in the order they first appear), then added.
void add_sequence_bias(std::vector<float>& scores, const std::vector<int64_t>& ids,
                       const std::vector<std::pair<std::vector<int64_t>, double>>& sequence_bias) {
  std::vector<std::pair<std::vector<int64_t>, float>> unique;
  for (const auto& entry : sequence_bias) {
    const auto& [seq, bias] = entry;
    auto same = std::find_if(unique.begin(), unique.end(), [&](const auto& u) { return u.first == entry.first; });
    if (same != unique.end()) same->second = static_cast<float>(bias);
    else unique.emplace_back(seq, static_cast<float>(bias));
  }
  std::vector<size_t> lengths;  // the longer sequences' lengths, in the order they first appear
  for (const auto& u : unique)
    if (u.first.size() > 1 && std::find(lengths.begin(), lengths.end(), u.first.size()) == lengths.end())
      lengths.push_back(u.first.size());
  std::map<int64_t, float> bias;
  for (const auto& u : unique)
    if (u.first.size() == 1) bias[u.first[0]] = u.second;
  for (size_t length : lengths)
    for (const auto& u : unique)
      if (u.first.size() == length && completes(u.first, ids)) bias[u.first.back()] += u.second;
  for (const auto& [id, b] : bias)
    if (in_row(id, scores)) scores[static_cast<size_t>(id)] += b;
}

// NoBadWordsLogitsProcessor: bad_words_ids as -inf biases, without the single-id sequences that are an EOS id.
void ban_bad_words(std::vector<float>& scores, const RowState& row, const GenerationConfig& g) {
  std::vector<std::pair<std::vector<int64_t>, double>> banned;
  for (const auto& seq : g.bad_words_ids)
    if (seq.size() != 1 || std::find(row.eos.begin(), row.eos.end(), seq[0]) == row.eos.end())
      banned.emplace_back(seq, -std::numeric_limits<double>::infinity());
  add_sequence_bias(scores, row.ids, banned);
}

// ForcedBOSTokenLogitsProcessor and ForcedEOSTokenLogitsProcessor: every score -inf but the forced ids', 0.
void force(std::vector<float>& scores, const std::vector<int64_t>& forced) {
  std::fill(scores.begin(), scores.end(), -kInf);
  for (int64_t id : forced)
    if (in_row(id, scores)) scores[static_cast<size_t>(id)] = 0.0f;
}

// InfNanRemoveLogitsProcessor.
void remove_invalid(std::vector<float>& scores) {
  for (float& x : scores)
    if (std::isnan(x)) x = 0.0f;
    else if (x == kInf) x = std::numeric_limits<float>::max();
    else if (x == -kInf) x = std::numeric_limits<float>::lowest();
}

// ExponentialDecayLengthPenalty: after start_index new ids, each EOS score gains |score| * (factor ** n - 1),
// n the new ids past start_index (a non-finite score gains nothing).
void decay_length(std::vector<float>& scores, const RowState& row, std::pair<int64_t, double> penalty) {
  if (row.generated <= penalty.first) return;
  const double n = static_cast<double>(row.generated - penalty.first);
  const auto grow = static_cast<float>(std::pow(penalty.second, n) - 1);
  std::map<int64_t, float> added;  // from the scores before any is raised (an id listed twice is raised once)
  for (int64_t id : row.eos)
    if (in_row(id, scores)) {
      const float s = scores[static_cast<size_t>(id)];
      added[id] = std::isfinite(s) ? std::abs(s) * grow : 0.0f;
    }
  for (const auto& [id, a] : added) scores[static_cast<size_t>(id)] += a;
}

void suppress(std::vector<float>& scores, const std::vector<int64_t>& ids) {
  for (int64_t id : ids)
    if (in_row(id, scores)) scores[static_cast<size_t>(id)] = -kInf;
}

// The encoder's input: an encoder-decoder's prompt, or a decoder-only model's (its ids before the generated).
std::vector<int64_t> prompt_of(const RowState& row) {
  if (row.encoder_ids) return *row.encoder_ids;
  return {row.ids.begin(), row.ids.end() - static_cast<std::ptrdiff_t>(row.generated)};
}

// EncoderRepetitionPenaltyLogitsProcessor: the prompt's ids' scores, multiplied by 1 / penalty when negative,
// divided by it otherwise, with that factor in float32 (a prompt id repeated is changed once).
void reward_prompt(std::vector<float>& scores, const std::vector<int64_t>& prompt, double penalty) {
  const auto factor = static_cast<float>(1.0 / penalty);
  std::vector<char> seen(scores.size(), 0);
  for (int64_t id : prompt)
    if (in_row(id, scores) && !seen[static_cast<size_t>(id)]) {
      seen[static_cast<size_t>(id)] = 1;
      float& x = scores[static_cast<size_t>(id)];
      x = x < 0 ? x * factor : x / factor;
    }
}

// EncoderNoRepeatNGramLogitsProcessor: every id that follows, in the prompt, the n - 1 ids the row ends with.
void ban_prompt_ngrams(std::vector<float>& scores, const RowState& row, int64_t ngram_size) {
  const auto n = static_cast<size_t>(ngram_size);
  if (row.ids.size() + 1 < n) return;
  const std::vector<int64_t> prompt = prompt_of(row);
  const auto tail = row.ids.end() - static_cast<std::ptrdiff_t>(n - 1);
  for (size_t start = 0; start + n <= prompt.size(); ++start)
    if (std::equal(tail, row.ids.end(), prompt.begin() + static_cast<std::ptrdiff_t>(start)))
      if (in_row(prompt[start + n - 1], scores)) scores[static_cast<size_t>(prompt[start + n - 1])] = -kInf;
}

// UnbatchedClassifierFreeGuidanceLogitsProcessor: both rows log-softmaxed, then scale * (scores - u) + u in float32.
void guide(std::vector<float>& scores, const RowState& row, double scale) {
  KILN_CHECK(row.unconditional && row.unconditional->size() == scores.size(),
             "generate: guidance_scale needs the row's unconditional logits");
  std::vector<float> u = *row.unconditional;
  log_softmax(u.data(), static_cast<int64_t>(u.size()));
  log_softmax(scores.data(), static_cast<int64_t>(scores.size()));
  const auto s = static_cast<float>(scale);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = s * (scores[i] - u[i]) + u[i];
}

}  // namespace

void apply_logits_processors(std::vector<float>& scores, const RowState& row, const GenerationConfig& g) {
  if (g.guidance_scale != 1.0) guide(scores, row, g.guidance_scale);
  if (!g.sequence_bias.empty()) add_sequence_bias(scores, row.ids, g.sequence_bias);
  if (g.encoder_repetition_penalty != 1.0) reward_prompt(scores, prompt_of(row), g.encoder_repetition_penalty);
  process_logits(scores, row.ids, g);
  if (g.encoder_no_repeat_ngram_size > 0) ban_prompt_ngrams(scores, row, g.encoder_no_repeat_ngram_size);
  if (!g.bad_words_ids.empty()) ban_bad_words(scores, row, g);
  suppress_early_eos(scores, row.generated, row.eos, g);
  if (g.forced_bos_token_id && row.ids.size() == 1) force(scores, {*g.forced_bos_token_id});
  if (!g.forced_eos_token_ids.empty() && row.generated == g.max_new_tokens - 1) force(scores, g.forced_eos_token_ids);
  if (g.remove_invalid_values) remove_invalid(scores);
  if (g.exponential_decay_length_penalty) decay_length(scores, row, *g.exponential_decay_length_penalty);
  suppress(scores, g.suppress_tokens);
  // SuppressTokensAtBeginLogitsProcessor's begin_index: the input's length, one more after a one-token input
  // when a BOS is forced (the forced id comes first).
  const int64_t input_length = static_cast<int64_t>(row.ids.size()) - row.generated;
  if (row.generated == (input_length <= 1 && g.forced_bos_token_id ? 1 : 0)) suppress(scores, g.begin_suppress_tokens);
}

void process_logits(std::vector<float>& logits, const std::vector<int64_t>& ids, const GenerationConfig& g) {
  const auto V = static_cast<int64_t>(logits.size());
  if (g.repetition_penalty != 1.0) {  // in float32, as torch multiplies or divides by the Python float
    const auto penalty = static_cast<float>(g.repetition_penalty);
    std::vector<bool> seen(logits.size(), false);
    for (int64_t id : ids)
      if (id >= 0 && id < V && !seen[static_cast<size_t>(id)]) {
        seen[static_cast<size_t>(id)] = true;
        float& x = logits[static_cast<size_t>(id)];
        x = x < 0 ? x * penalty : x / penalty;
      }
  }
  const auto n = static_cast<size_t>(g.no_repeat_ngram_size);
  if (n == 0 || ids.size() + 1 < n) return;
  // Every earlier n-gram whose first n-1 ids are the last n-1: its last id would repeat it.
  const size_t len = ids.size();
  for (size_t start = 0; start + n <= len; ++start)
    if (std::equal(ids.begin() + static_cast<std::ptrdiff_t>(start),
                   ids.begin() + static_cast<std::ptrdiff_t>(start + n - 1),
                   ids.begin() + static_cast<std::ptrdiff_t>(len - (n - 1))))
      if (const int64_t banned = ids[start + n - 1]; banned >= 0 && banned < V)
        logits[static_cast<size_t>(banned)] = -std::numeric_limits<float>::infinity();
}

void suppress_early_eos(std::vector<float>& scores, int64_t generated, const std::vector<int64_t>& eos,
                        const GenerationConfig& g) {
  if (generated >= g.min_new_tokens) return;
  for (int64_t id : eos)
    if (id >= 0 && id < static_cast<int64_t>(scores.size()))
      scores[static_cast<size_t>(id)] = -std::numeric_limits<float>::infinity();
}

namespace {

// MinPLogitsWarper: the float32 probabilities below min_p times the largest
// go, except the min_tokens_to_keep most likely (equal ones by index).
void min_p_filter(std::vector<float>& scores, double min_p, int64_t min_tokens_to_keep) {
  const float top = *std::max_element(scores.begin(), scores.end());
  if (!(top > -std::numeric_limits<float>::infinity())) return;  // nothing left to filter (or a NaN: draw() says)
  std::vector<float> p(scores.size());
  float total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(scores[i] - top);
  const float threshold = static_cast<float>(min_p) * (1.0f / total);
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  const auto keep = std::min<size_t>(static_cast<size_t>(min_tokens_to_keep), order.size());
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::vector<char> kept(scores.size(), 0);
  for (size_t i = 0; i < keep; ++i) kept[static_cast<size_t>(order[i])] = 1;
  for (size_t i = 0; i < p.size(); ++i)
    if (!kept[i] && p[i] / total < threshold) scores[i] = -std::numeric_limits<float>::infinity();
}

// softmax of one float32 row, the exponentials summed in double.
std::vector<float> softmax(const std::vector<float>& scores) {
  const float m = *std::max_element(scores.begin(), scores.end());
  std::vector<float> p(scores.size());
  double total = 0;
  for (size_t i = 0; i < p.size(); ++i) total += p[i] = std::exp(scores[i] - m);
  for (float& x : p) x = static_cast<float>(x / total);
  return p;
}

// The min_tokens_to_keep-th largest score (EpsilonLogitsWarper's and EtaLogitsWarper's floor: a score not below
// it is kept).
float kth_largest(std::vector<float> scores, int64_t min_tokens_to_keep) {
  const auto k = static_cast<size_t>(std::min<int64_t>(min_tokens_to_keep, static_cast<int64_t>(scores.size())));
  std::nth_element(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(k - 1), scores.end(),
                   std::greater<float>());
  return scores[k - 1];
}

// TypicalLogitsWarper.
void typical_filter(std::vector<float>& scores, double mass, int64_t min_tokens_to_keep) {
  std::vector<float> normalized = scores;
  log_softmax(normalized.data(), static_cast<int64_t>(normalized.size()));
  double entropy = 0;  // -(normalized * p).nansum(): the -inf scores' 0 * -inf is left out
  for (float x : normalized)
    if (const float term = x * std::exp(x); !std::isnan(term)) entropy -= term;
  const auto ent = static_cast<float>(entropy);
  std::vector<float> shifted(scores.size());
  for (size_t i = 0; i < shifted.size(); ++i) shifted[i] = std::abs(-normalized[i] - ent);
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return shifted[a] < shifted[b]; });
  std::vector<float> sorted_logits;
  for (int64_t i : order) sorted_logits.push_back(scores[static_cast<size_t>(i)]);
  const std::vector<float> p = softmax(sorted_logits);
  size_t last = 0;  // how many cumulative probabilities stay below the mass, at most the last index
  double cumulative = 0;
  for (float x : p)
    if (static_cast<float>(cumulative += x) < static_cast<float>(mass)) ++last;
  last = std::min(last, order.size() - 1);
  const float cut = shifted[static_cast<size_t>(order[last])];
  for (size_t k = static_cast<size_t>(std::max<int64_t>(min_tokens_to_keep, 0)); k < order.size(); ++k)
    if (shifted[static_cast<size_t>(order[k])] > cut) scores[static_cast<size_t>(order[k])] = -kInf;
}

// EpsilonLogitsWarper (eta false) and EtaLogitsWarper (eta true, epsilon its eta_cutoff): probabilities below
// the cutoff go, except scores not below the min_tokens_to_keep-th largest.
void probability_floor(std::vector<float>& scores, double epsilon, bool eta, int64_t min_tokens_to_keep) {
  const std::vector<float> p = softmax(scores);
  auto cutoff = static_cast<float>(epsilon);
  if (eta) {  // torch.distributions.Categorical(logits=scores).entropy(), the -inf log-probs clamped to float's lowest
    std::vector<float> logp = scores;
    log_softmax(logp.data(), static_cast<int64_t>(logp.size()));
    double entropy = 0;
    for (size_t i = 0; i < p.size(); ++i) entropy -= std::max(logp[i], std::numeric_limits<float>::lowest()) * p[i];
    cutoff = std::min(cutoff, std::sqrt(cutoff) * std::exp(-static_cast<float>(entropy)));
  }
  const float floor = kth_largest(scores, min_tokens_to_keep);
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] < cutoff && scores[i] < floor) scores[i] = -kInf;
}

// TopHLogitsWarper: the 100 largest scores (ties by index) as a Categorical; the largest ones whose cumulative
// -p * log p stays within top_h times its entropy are kept (the largest always), everything else goes.
void top_h_filter(std::vector<float>& scores, double top_h) {
  std::vector<int64_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  const size_t n = std::min<size_t>(100, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
  order.resize(n);
  std::vector<float> top;
  for (int64_t i : order) top.push_back(scores[static_cast<size_t>(i)]);
  std::vector<float> normalized = top;
  log_softmax(normalized.data(), static_cast<int64_t>(n));
  const std::vector<float> p = softmax(top);
  double entropy = 0;  // Categorical.entropy: the -inf log-probs clamped to float's lowest
  for (size_t i = 0; i < n; ++i) entropy -= std::max(normalized[i], std::numeric_limits<float>::lowest()) * p[i];
  const float tau = static_cast<float>(entropy) * static_cast<float>(top_h);
  std::vector<char> keep(scores.size(), 0);
  double cumulative = 0;  // float32 terms summed in double, each sum rounded to float32 (a NaN term ends it)
  for (size_t i = 0; i < n; ++i) {
    cumulative += -p[i] * std::log(p[i]);
    keep[static_cast<size_t>(order[i])] = i == 0 || static_cast<float>(cumulative) <= tau;
  }
  for (size_t i = 0; i < scores.size(); ++i)
    if (!keep[i]) scores[i] = -kInf;
}

}  // namespace

void warp_logits(std::vector<float>& scores, const GenerationConfig& g, int64_t min_tokens_to_keep) {
  const auto V = static_cast<int64_t>(scores.size());
  const float filtered = -std::numeric_limits<float>::infinity();
  if (g.temperature != 1.0)
    for (float& x : scores) x /= static_cast<float>(g.temperature);
  if (g.top_h) top_h_filter(scores, *g.top_h);
  if (g.top_k > 0) {  // TopKLogitsWarper: below the k-th largest value goes (ties with it stay)
    const int64_t k = std::min(std::max(g.top_k, min_tokens_to_keep), V);
    std::vector<float> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<size_t>(k - 1)];
    for (float& x : scores)
      if (x < kth) x = filtered;
  }
  if (g.top_p < 1.0) {  // TopPLogitsWarper: the smallest tokens whose mass is at most 1 - top_p go
    std::vector<int64_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return scores[a] < scores[b]; });
    const float m = scores[static_cast<size_t>(order.back())];
    if (m == filtered) return;  // nothing left to filter
    std::vector<double> p(static_cast<size_t>(V));
    double total = 0;
    for (int64_t i = 0; i < V; ++i) total += p[i] = std::exp(static_cast<double>(scores[order[i]]) - m);
    // As torch rounds them: float32 probabilities, summed in double (CPU cumsum), each sum rounded to float32 and
    // compared with 1 - top_p in float32, so a mass that is 1 - top_p up to float32 rounding goes.
    const auto cut = static_cast<float>(1.0 - g.top_p);
    double cumulative = 0;
    for (int64_t i = 0; i < V - min_tokens_to_keep; ++i) {
      cumulative += static_cast<float>(p[i] / total);
      if (static_cast<float>(cumulative) <= cut) scores[order[i]] = filtered;
    }
  }
  if (g.min_p > 0) min_p_filter(scores, g.min_p, min_tokens_to_keep);
  if (!(*std::max_element(scores.begin(), scores.end()) > filtered)) return;  // nothing left to filter
  if (g.typical_p < 1.0) typical_filter(scores, g.typical_p, min_tokens_to_keep);
  if (g.epsilon_cutoff > 0) probability_floor(scores, g.epsilon_cutoff, false, min_tokens_to_keep);
  if (g.eta_cutoff > 0) probability_floor(scores, g.eta_cutoff, true, min_tokens_to_keep);
}

void log_softmax(float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - m);
  const auto lse = static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] - m - lse;
}

void finish_scores(std::vector<float>& scores, const GenerationConfig& g) {
  if (g.renormalize_logits) log_softmax(scores.data(), static_cast<int64_t>(scores.size()));
}

namespace {

void check_ids(const std::vector<int64_t>& ids, int64_t vocab_size, const char* key) {
  KILN_CHECK(!ids.empty(), "generate: ", key, " holds an empty token sequence");
  for (int64_t id : ids)
    KILN_CHECK(id >= 0 && id < vocab_size, "generate: ", key, " holds token id ", id, ", outside the vocabulary [0, ",
               vocab_size, ")");
}

}  // namespace

void check_logits_processors(const GenerationConfig& g, int64_t vocab_size) {
  for (const auto& [seq, bias] : g.sequence_bias) {
    check_ids(seq, vocab_size, "sequence_bias");
    KILN_CHECK(std::isfinite(bias), "generate: sequence_bias's biases must be finite numbers, got ", bias);
  }
  for (const auto& seq : g.bad_words_ids) check_ids(seq, vocab_size, "bad_words_ids");
  if (g.forced_bos_token_id) check_ids({*g.forced_bos_token_id}, vocab_size, "forced_bos_token_id");
  if (!g.forced_eos_token_ids.empty()) check_ids(g.forced_eos_token_ids, vocab_size, "forced_eos_token_id");
  // GenerationConfig.validate: forcing only ids that are suppressed leaves nothing to choose.
  const std::set<int64_t> suppressed(g.suppress_tokens.begin(), g.suppress_tokens.end());
  auto all_suppressed = [&](const std::vector<int64_t>& forced) {
    return !forced.empty() &&
           std::all_of(forced.begin(), forced.end(), [&](int64_t id) { return suppressed.count(id) > 0; });
  };
  KILN_CHECK(!g.forced_bos_token_id || !all_suppressed({*g.forced_bos_token_id}), "generate: forced_bos_token_id ",
             g.forced_bos_token_id.value_or(0), " is also in suppress_tokens; forcing a token while suppressing it "
             "leaves no token to choose");
  KILN_CHECK(!all_suppressed(g.forced_eos_token_ids), "generate: every forced_eos_token_id is also in suppress_tokens; "
             "forcing a token while suppressing it leaves no token to choose (min_new_tokens delays an EOS)");
  if (g.exponential_decay_length_penalty)
    KILN_CHECK(std::isfinite(g.exponential_decay_length_penalty->second),
               "generate: exponential_decay_length_penalty's decay factor must be a finite number, got ",
               g.exponential_decay_length_penalty->second);
  if (!g.do_sample) return;
  KILN_CHECK(!g.top_h || (*g.top_h > 0 && *g.top_h <= 1), "generate: top_h must be in (0, 1], got ",
             g.top_h.value_or(0));
  KILN_CHECK(g.typical_p > 0 && g.typical_p <= 1, "generate: typical_p must be in (0, 1] (1 = off), got ", g.typical_p);
  KILN_CHECK(g.epsilon_cutoff >= 0 && g.epsilon_cutoff < 1,
             "generate: epsilon_cutoff must be in [0, 1) (0 = off), got ", g.epsilon_cutoff);
  KILN_CHECK(g.eta_cutoff >= 0 && g.eta_cutoff < 1, "generate: eta_cutoff must be in [0, 1) (0 = off), got ",
             g.eta_cutoff);
}

}  // namespace kiln::models
