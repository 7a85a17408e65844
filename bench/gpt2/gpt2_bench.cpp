// kiln side of bench/gpt2: one GPT-2 training step (forward, backward, AdamW;
// fp32; CPU) like gpt2_train_step.py, and generation tokens/s with and without
// the key/value cache. Prints JSON lines.
//
//   bench_gpt2 [--layers 12] [--embd 768] [--heads 12] [--batch 4] [--seq 256] [--steps 5] [--gen_tokens 32]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "kiln/kiln.h"
#include "kiln/models/generation.h"
#include "kiln/models/gpt2.h"

using namespace kiln;

int main(int argc, char** argv) try {
  std::map<std::string, int64_t> a = {{"layers", 12}, {"embd", 768}, {"heads", 12}, {"batch", 4},
                                      {"seq", 256},   {"steps", 5},  {"vocab", 50257}, {"gen_tokens", 32}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = std::string(argv[i]).substr(2);
    KILN_CHECK(a.count(k), "bench_gpt2: unknown flag ", argv[i]);
    a[k] = std::stoll(argv[i + 1]);
  }
  models::GPT2Config c;
  c.n_layer = a["layers"];
  c.n_embd = a["embd"];
  c.n_head = a["heads"];
  c.vocab_size = a["vocab"];
  auto model = models::create_model("GPT2LMHeadModel", c, 0);
  model->train();
  optim::AdamW opt(model->parameters(), {.lr = 5e-5, .weight_decay = 0.01});
  const int64_t B = a["batch"], T = a["seq"];
  std::vector<int64_t> ids(B * T);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = (i * 7919) % c.vocab_size;
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {B, T}, Device::cpu(), "input_ids");
  in.labels = in.input_ids;
  std::vector<double> times;
  float loss_value = 0;
  for (int64_t step = 0; step < a["steps"] + 2; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor loss = model->forward(in).loss;
    loss.backward();
    opt.step();
    opt.zero_grad();  // as HF's Trainer: the gradients die inside the step
    mark_step();
    loss_value = loss.item();
    if (step >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  double step_s = times[times.size() / 2];
  double params = 0;
  for (auto& p : model->parameters()) params += static_cast<double>(p.numel());
  std::printf("{\"impl\": \"kiln\", \"threads\": %d, \"median_step_s\": %.6f, \"loss\": %.6f, \"peak_rss_mb\": %.1f, "
              "\"tokens_per_s\": %.1f, \"model_gflops\": %.1f}\n",
              omp_get_max_threads(), step_s, loss_value, ru.ru_maxrss / 1024.0, B * T / step_s,
              6.0 * params * B * T / step_s / 1e9);

  // Generation: one prompt, greedy, with and without the cache.
  auto& gpt2 = dynamic_cast<models::GPT2ForTask&>(*model);
  models::GenerationConfig g;
  g.max_new_tokens = a["gen_tokens"];
  g.eos_token_ids = {-1};
  std::vector<std::vector<int64_t>> prompt{{464, 3290, 318, 257}};
  for (bool cache : {true, false}) {
    g.use_cache = cache;
    models::GenerationConfig warm = g;
    warm.max_new_tokens = 2;
    models::generate(gpt2, prompt, warm);
    auto t0 = std::chrono::steady_clock::now();
    models::generate(gpt2, prompt, g);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"generation\": \"%s\", \"new_tokens\": %lld, \"tokens_per_s\": %.2f}\n", cache ? "kv-cache" : "no-cache",
                (long long)g.max_new_tokens, g.max_new_tokens / s);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_gpt2: error: %s\n", e.what());
  return 1;
}
