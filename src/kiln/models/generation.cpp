#include "kiln/models/generation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "kiln/core/error.h"
#include "kiln/runtime/context.h"

namespace kiln::models {

namespace {

// Picks the next token from one row of logits on the host.
int64_t choose(std::vector<float> logits, const GenerationConfig& g, std::mt19937_64& rng) {
  if (!g.do_sample) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  KILN_CHECK(g.temperature > 0, "generate: temperature must be > 0, got ", g.temperature);
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  int64_t keep = g.top_k > 0 ? std::min(g.top_k, V) : V;
  double m = logits[order[0]] / g.temperature, total = 0;
  std::vector<double> p(keep);
  for (int64_t i = 0; i < keep; ++i) total += p[i] = std::exp(logits[order[i]] / g.temperature - m);
  if (g.top_p < 1.0) {  // the smallest prefix whose mass reaches top_p
    double acc = 0;
    int64_t n = 0;
    while (n < keep && acc < g.top_p * total) acc += p[n++];
    keep = std::max<int64_t>(n, 1);
    total = acc;
  }
  double r = std::uniform_real_distribution<double>(0, total)(rng);
  for (int64_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r <= 0) return order[i];
  }
  return order[keep - 1];
}

}  // namespace

std::vector<std::vector<int64_t>> generate(GPT2ForTask& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& g) {
  KILN_CHECK(model.has_lm_head(), "generate: ", model.architecture(), " has no language-model head");
  KILN_CHECK(g.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  const GPT2Config& c = model.gpt2_config();
  std::optional<int64_t> eos = g.eos_token_id ? g.eos_token_id : c.eos_token_id;
  Device dev = model.parameters().front().device();
  model.eval();
  NoGradGuard no_grad;
  std::mt19937_64 rng(g.seed);
  std::vector<std::vector<int64_t>> out;
  for (const auto& prompt : prompts) {
    KILN_CHECK(!prompt.empty(), "generate: empty prompt");
    int64_t need = static_cast<int64_t>(prompt.size()) + g.max_new_tokens;
    KILN_CHECK(need <= c.n_positions, "generate: prompt (", prompt.size(), " tokens) + max_new_tokens (",
               g.max_new_tokens, ") exceeds n_positions ", c.n_positions);
    std::vector<int64_t> seq = prompt;
    if (!g.use_cache) {
      // Reference path: the whole sequence through the model every step.
      for (int64_t n = 0; n < g.max_new_tokens; ++n) {
        ModelInputs in;
        in.input_ids = Tensor::from_vector(seq, {1, static_cast<int64_t>(seq.size())}, dev, "input_ids");
        Tensor logits = model.forward(in).logits;
        auto all = logits.to_vector<float>();
        std::vector<float> last(all.end() - c.vocab_size, all.end());
        int64_t next = choose(std::move(last), g, rng);
        seq.push_back(next);
        if (eos && next == *eos) break;
      }
      out.push_back(std::move(seq));
      continue;
    }
    const int64_t L = std::min(c.n_positions, (need + g.bucket - 1) / g.bucket * g.bucket);
    const int64_t NH = c.n_head, D = c.n_embd / c.n_head;
    std::vector<Tensor> kc, vc;
    std::vector<float> zeros_kv(static_cast<size_t>(NH * L * D), 0.0f);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      kc.push_back(Tensor::from_vector(zeros_kv, {1, NH, L, D}, dev, "k_cache"));
      vc.push_back(Tensor::from_vector(zeros_kv, {1, NH, L, D}, dev, "v_cache"));
    }
    // The prompt goes through the same one-token step (one graph for everything).
    for (int64_t t = 0; t + 1 < need + 1; ++t) {
      if (t >= static_cast<int64_t>(seq.size())) break;
      Tensor token = Tensor::from_vector(std::vector<int64_t>{seq[t]}, {1, 1}, dev, "token");
      Tensor pos = Tensor::from_vector(std::vector<int64_t>{t}, {}, dev, "position");
      Tensor logits = model.decode_step(token, pos, kc, vc);
      mark_step(dev);
      if (t + 1 < static_cast<int64_t>(seq.size())) continue;  // still reading the prompt
      if (static_cast<int64_t>(seq.size()) >= need) break;
      int64_t next = choose(logits.to_vector<float>(), g, rng);
      seq.push_back(next);
      if (eos && next == *eos) break;
    }
    out.push_back(std::move(seq));
  }
  return out;
}

}  // namespace kiln::models
