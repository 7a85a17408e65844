// kiln side of bench/bert: one training step (forward, backward, AdamW) of
// BertForSequenceClassification, fp32 on the CPU, the same model, batch and
// optimizer as bert_train_step.py. Prints one JSON line.
//
//   bench_bert_step [--layers 12] [--hidden 768] [--heads 12] [--batch 8] [--seq 128] [--steps 10]
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "kiln/kiln.h"
#include "kiln/models/model.h"

using namespace kiln;

int main(int argc, char** argv) try {
  std::map<std::string, int64_t> a = {{"layers", 12}, {"hidden", 768}, {"heads", 12}, {"batch", 8},
                                      {"seq", 128},   {"steps", 10},   {"vocab", 30522}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = std::string(argv[i]).substr(2);
    KILN_CHECK(a.count(k), "bench_bert_step: unknown flag ", argv[i]);
    a[k] = std::stoll(argv[i + 1]);
  }
  models::BertConfig c = *models::BertConfig::preset("bert-base");
  c.num_hidden_layers = a["layers"];
  c.hidden_size = a["hidden"];
  c.num_attention_heads = a["heads"];
  c.intermediate_size = 4 * a["hidden"];
  c.vocab_size = a["vocab"];
  c.set_num_labels(2);
  auto model = models::create_model("BertForSequenceClassification", c, 0);
  model->train();
  optim::AdamW opt(model->parameters(), {.lr = 5e-5, .weight_decay = 0.01});

  const int64_t B = a["batch"], T = a["seq"];
  std::vector<int64_t> ids(B * T), labels(B);
  for (int64_t i = 0; i < B * T; ++i) ids[i] = (i * 7919) % c.vocab_size;
  for (int64_t i = 0; i < B; ++i) labels[i] = i % 2;
  models::ModelInputs in;
  in.input_ids = Tensor::from_vector(ids, {B, T}, Device::cpu(), "input_ids");
  in.attention_mask = Tensor::from_vector(std::vector<int64_t>(B * T, 1), {B, T}, Device::cpu(), "attention_mask");
  in.labels = Tensor::from_vector(labels, {B}, Device::cpu(), "labels");

  std::vector<double> times;
  float loss_value = 0;
  double trace_s = 0;
  for (int64_t step = 0; step < a["steps"] + 2; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    Tensor loss = model->forward(in).loss;
    loss.backward();
    opt.step();
    opt.zero_grad();  // as HF's Trainer: the gradients die inside the step
    mark_step();
    trace_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss_value = loss.item();
    if (step >= 2) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto m = metrics::snapshot();
  std::printf(
      "{\"impl\": \"kiln\", \"threads\": %d, \"median_step_s\": %.6f, \"loss\": %.6f, \"peak_rss_mb\": %.1f, \"compiles\": %lld, "
      "\"compile_s\": %.4f, \"trace_and_queue_s\": %.4f, \"arena_mb\": %.1f}\n",
      omp_get_max_threads(), times[times.size() / 2], loss_value, ru.ru_maxrss / 1024.0, (long long)m.compiles, m.compile_seconds, trace_s,
      m.arena_bytes / 1048576.0);
  for (const auto& r : m.compile_reasons) std::fprintf(stderr, "compile: %s\n", r.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_bert_step: error: %s\n", e.what());
  return 1;
}
