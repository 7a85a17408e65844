// A fused elementwise chain against the same chain unfused, in one run.
// Unfused = eager mode: each op is its own kernel writing its own buffer,
// as an eager framework runs it. The chain is BERT's bias + GELU + residual +
// dropout-free scale on a [B*T, 3072] activation.
//
// With --adamw: one AdamW step with gradient clipping (the traced optimizer,
// as the Trainer runs it) against a hand-written C++ loop doing the same
// arithmetic over the same arrays: how close the fused update is to memory
// bandwidth.
//
//   build/bin/fusion_bench [--rows 1024] [--cols 3072] [--iters 50] [--adamw]
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kiln/kiln.h"

using namespace kiln;

// Eight parameters of [rows, cols] (the optimizer runs a kernel per
// parameter, as for a model's weight matrices).
static int adamw_bench(int64_t rows, int64_t cols, int iters) {
  constexpr int kParams = 8;
  Generator gen(0);
  std::vector<Tensor> params, grads;
  for (int k = 0; k < kParams; ++k) {
    Tensor p = randn({rows, cols}, gen) * 0.02;
    p.requires_grad_();
    params.push_back(p);
    grads.push_back(randn({rows, cols}, gen) * 1e-3);
  }
  mark_step();
  wait_device_ops();
  optim::AdamWOptions opts;
  opts.weight_decay = 0.01;
  optim::AdamW opt(params, opts);
  std::vector<double> t;
  for (int i = 0; i < iters + 3; ++i) {
    for (int k = 0; k < kParams; ++k) params[k].set_grad(grads[k]);
    auto t0 = std::chrono::steady_clock::now();
    optim::clip_grad_norm(params, 1.0);
    opt.step();
    for (auto& p : params) p.set_grad(Tensor());
    mark_step();
    wait_device_ops();
    if (i >= 3) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double traced = median(t);

  // The same arithmetic by hand: one pass for the norm, one for the update.
  const int64_t n = rows * cols;
  std::vector<std::vector<float>> p(kParams), g(kParams), m(kParams), v(kParams);
  for (int k = 0; k < kParams; ++k) {
    p[k] = params[k].to_vector<float>();
    g[k] = grads[k].to_vector<float>();
    m[k].assign(n, 0.0f);
    v[k].assign(n, 0.0f);
  }
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, lr = 1e-3f;
  t.clear();
  for (int i = 0; i < iters + 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double total = 0;
    for (int k = 0; k < kParams; ++k) {
      const float* gk = g[k].data();
#pragma omp parallel for simd reduction(+ : total) schedule(static)
      for (int64_t j = 0; j < n; ++j) total += double(gk[j]) * gk[j];
    }
    const float coef = float(std::min(1.0, 1.0 / (std::sqrt(total) + 1e-6)));
    const float step_size = lr / (1 - std::pow(b1, i + 1)), inv_bc2 = 1 / std::sqrt(1 - std::pow(b2, i + 1));
    const float decay = 1 - lr * 0.01f;
    for (int k = 0; k < kParams; ++k) {
      float *pk = p[k].data(), *mk = m[k].data(), *vk = v[k].data();
      const float* gk = g[k].data();
#pragma omp parallel for simd schedule(static)
      for (int64_t j = 0; j < n; ++j) {
        float gj = gk[j] * coef;
        float mj = mk[j] * b1 + gj * (1 - b1), vj = vk[j] * b2 + gj * gj * (1 - b2);
        mk[j] = mj;
        vk[j] = vj;
        pk[j] = pk[j] * decay - step_size * mj / (std::sqrt(vj) * inv_bc2 + eps);
      }
    }
    if (i >= 3) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double by_hand = median(t);
  // Memory traffic of the update: read g twice (norm, update), p, m, v once; write p, m, v.
  const double gb = 4.0 * double(n) * kParams * 8 / 1e9;
  std::printf("AdamW step with gradient clipping, %d parameters of [%lld, %lld] f32 (%.1fM values)\n", kParams,
              (long long)rows, (long long)cols, double(n) * kParams / 1e6);
  std::printf("  %-12s %10s %12s\n", "", "median ms", "GB/s (min)");
  std::printf("  %-12s %10.3f %12.2f\n", "kiln traced", traced * 1e3, gb / traced);
  std::printf("  %-12s %10.3f %12.2f\n", "C++ loop", by_hand * 1e3, gb / by_hand);
  std::printf("  kiln / loop: %.2fx the time\n", traced / by_hand);
  return 0;
}

int main(int argc, char** argv) {
  int64_t rows = 1024, cols = 3072;
  int iters = 50;
  bool adamw = false;
  for (int i = 1; i < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--adamw") {
      adamw = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "fusion_bench: %s needs a value\n", f.c_str());
      return 2;
    }
    if (f == "--rows") rows = std::stoll(argv[i + 1]);
    else if (f == "--cols") cols = std::stoll(argv[i + 1]);
    else if (f == "--iters") iters = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "fusion_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  if (adamw) return adamw_bench(rows, cols, iters);
  Generator gen(0);
  Tensor x = randn({rows, cols}, gen), bias = randn({cols}, gen), res = randn({rows, cols}, gen);
  mark_step();
  wait_device_ops();
  auto chain = [&] { return (gelu(x + bias) + res) * 0.5; };

  auto time_it = [&](bool eager) {
    set_eager_mode(eager);
    std::vector<double> t;
    for (int i = 0; i < iters + 3; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      Tensor y = chain();
      mark_step();
      wait_device_ops();
      if (i >= 3) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    set_eager_mode(false);
    return median(t);
  };
  double fused = time_it(false), unfused = time_it(true);
  double gb = 4.0 * rows * cols * 3 / 1e9;  // read x, res; write y (bias negligible)
  std::printf("elementwise chain (x + bias -> gelu -> + residual -> * 0.5) on [%lld, %lld] f32\n",
              (long long)rows, (long long)cols);
  std::printf("  %-10s %10s %12s\n", "", "median ms", "GB/s (min)");
  std::printf("  %-10s %10.3f %12.2f\n", "fused", fused * 1e3, gb / fused);
  std::printf("  %-10s %10.3f %12.2f\n", "unfused", unfused * 1e3, gb / unfused);
  std::printf("  speedup of fusion: %.2fx\n", unfused / fused);
  return 0;
}
