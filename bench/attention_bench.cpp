// The fused attention op (ops.h's fused_attention; backend/cpu/attention.cpp
// on the CPU) against the composite the models would otherwise trace
// (matmul, scale, causal where, softmax, dropout, matmul), in one run: the
// forward and its gradient for q, k and v, as one traced step each, at
// GPT-2's shape by default (4 × 12 heads × 256 × 64, causal, dropout 0.1).
// Prints the median step of each and the ratio, and the six attention
// products' GFLOP/s (q kᵀ, p v and their gradients; causal: only the keys
// each row sees).
//
//   build/bin/attention_bench [--batch 4] [--heads 12] [--seq 256] [--dim 64]
//                             [--dropout 0.1] [--causal 1] [--window 0] [--bf16 0] [--iters 30] [--only fused|composite]
// (--only: time one side, e.g. under perf).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <omp.h>

#include "bench_util.h"
#include "kiln/kiln.h"

using namespace kiln;

namespace {

struct Geometry {
  int64_t B = 4, H = 12, T = 256, D = 64;
  double dropout = 0.1;
  bool causal = true;
  int64_t window = 0;  // causal: a sliding window of that many keys (Mistral's, Gemma 2's)
  bool bf16 = false;   // under Autocast (--bf16): bf16 q, k, v and block products
};

Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Geometry& s, double scale, Generator& gen) {
  Tensor scores = matmul(q, k, false, true) * scale;
  if (s.causal) {
    Tensor iq = reshape(arange(s.T, DType::i64), {s.T, 1}), ik = reshape(arange(s.T, DType::i64), {1, s.T});
    Tensor visible = le(ik, iq);
    if (s.window > 0) visible = logical_and(visible, gt(ik + static_cast<double>(s.window), iq));
    scores = where(reshape(visible, {1, 1, s.T, s.T}), scores,
                   full({}, std::numeric_limits<float>::lowest(), DType::f32));
  }
  Tensor p = softmax(scores, -1);
  if (s.dropout > 0) p = dropout(p, s.dropout, gen);
  return matmul(p, v);
}

// Median seconds of one step: the attention, a weighted sum of its output,
// and the gradient for q, k and v.
double time_steps(const Geometry& s, bool fused, int iters) {
  Generator gen(0);
  const kiln::Shape shape{s.B, s.H, s.T, s.D};
  Tensor q = randn(shape, gen), k = randn(shape, gen), v = randn(shape, gen), w = randn(shape, gen);
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  mark_step();
  wait_device_ops();
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  std::vector<double> t;
  for (int i = 0; i < iters + 3; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Autocast autocast(s.bf16);
    Tensor y = fused ? fused_attention(q, k, v, {Tensor(), s.causal, scale, s.dropout, &gen, s.window})
                     : composite(q, k, v, s, scale, gen);
    sum(y * w).backward();  // (q, k and v hold the gradients until the step has run them)
    mark_step();
    wait_device_ops();
    for (Tensor* x : {&q, &k, &v}) x->set_grad(Tensor());
    if (i >= 3) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  Geometry s;
  int iters = 30;
  std::string only;
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "attention_bench: %s needs a value\n", f.c_str());
      return 2;
    }
    const std::string x = argv[i + 1];
    // The whole value as a number ("12abc" is not 12).
    auto whole = [&](auto parse) {
      size_t used = 0;
      const auto v = parse(x, &used);
      if (used != x.size()) throw std::invalid_argument(x);
      return v;
    };
    auto integer = [&] { return whole([](const std::string& t, size_t* n) { return std::stoll(t, n); }); };
    try {
      if (f == "--batch") s.B = integer();
      else if (f == "--heads") s.H = integer();
      else if (f == "--seq") s.T = integer();
      else if (f == "--dim") s.D = integer();
      else if (f == "--dropout") s.dropout = whole([](const std::string& t, size_t* n) { return std::stod(t, n); });
      else if (f == "--causal") s.causal = integer() != 0;
      else if (f == "--window") s.window = integer();
      else if (f == "--bf16") s.bf16 = integer() != 0;
      else if (f == "--iters") iters = static_cast<int>(std::min<long long>(integer(), 1 << 30));
      else if (f == "--only" && (x == "fused" || x == "composite")) only = x;
      else if (f == "--only") {
        std::fprintf(stderr, "attention_bench: --only takes fused or composite, got '%s'\n", x.c_str());
        return 2;
      }
      else {
        std::fprintf(stderr, "attention_bench: unknown flag %s\n", f.c_str());
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "attention_bench: %s needs a number, got '%s'\n", f.c_str(), x.c_str());
      return 2;
    }
  }
  if (s.B < 1 || s.H < 1 || s.T < 1 || s.D < 1 || iters < 1 || s.dropout < 0 || s.dropout >= 1 || s.window < 0 ||
      (s.window > 0 && !s.causal)) {
    std::fprintf(stderr, "attention_bench: sizes and --iters must be at least 1, --dropout in [0, 1), --window >= 0 "
                         "(with --causal 1)\n");
    return 2;
  }
  const double fused = only == "composite" ? 0.0 : time_steps(s, true, iters);
  const double comp = only == "fused" ? 0.0 : time_steps(s, false, iters);
  // Six products of B·H·T·T·D multiply-adds each (q kᵀ, p v; dP, dv, dq,
  // dk), of which a causal row needs its first i + 1 keys.
  // (with a window, its last `window` keys)
  double keys = 0;
  for (int64_t i = 0; i < s.T; ++i) keys += !s.causal ? s.T : s.window > 0 ? std::min(i + 1, s.window) : i + 1;
  const double share = keys / (static_cast<double>(s.T) * static_cast<double>(s.T));
  const double flops = 6 * 2.0 * static_cast<double>(s.B * s.H * s.T * s.T * s.D) * share;
  std::printf("attention forward + gradient, [%lld, %lld, %lld, %lld], %s, window %lld, dropout %g, %s, %d threads\n",
              static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.T),
              static_cast<long long>(s.D), s.causal ? "causal" : "not causal", static_cast<long long>(s.window),
              s.dropout, s.bf16 ? "bf16 (Autocast)" : "f32", omp_get_max_threads());
  std::printf("  %-10s %10s %14s\n", "", "median ms", "GFLOP/s");
  if (fused > 0) std::printf("  %-10s %10.3f %14.1f\n", "fused", fused * 1e3, flops / fused / 1e9);
  if (comp > 0) std::printf("  %-10s %10.3f %14.1f\n", "composite", comp * 1e3, flops / comp / 1e9);
  if (fused > 0 && comp > 0) std::printf("  fused / composite: %.2fx the time\n", fused / comp);
  if (s.causal)
    std::printf(s.window > 0 ? "  (GFLOP/s count the keys in each row's window only)\n"
                             : "  (GFLOP/s count the products' causal half only)\n");
  return 0;
}
