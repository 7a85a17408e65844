// step_products: a training step's matrix products alone, each distinct one
// timed once a round and counted as often as the step runs it, through the
// CPU backend's own dispatch (oneDNN's matmul primitive where
// prefers_matmul_primitive names the shape, its sgemm otherwise; a layer's
// input and weight gradients side by side on one thread each, as the
// compiler pairs them), and in the same run the single-GEMM peak that `kiln
// bench` divides by (the best of three runs of each weight's [B·T, in] ×
// [in, out] product). The products' median time is what the step would take
// if nothing but its products took time: their share of the peak is the
// ceiling of `kiln bench`'s "fraction of the GEMM peak".
//
//   step_products [gpt2|bert-base] [--rounds N] [--bf16]
//
// --bf16: the same products with bf16 operands and f32 results, as `--bf16`
// runs them on a CPU with bf16 dot products (oneDNN's bf16 matmul
// primitive), timed in the same rounds beside the f32 ones, with the bf16
// peak measured the same way.
//
// gpt2: causal LM, batch 4 × 256, Conv1D weights [in, out], the LM head tied
// to the word embeddings; bert-base: batch 8 × 128, nn.Linear weights [out,
// in], the encoder's products (the pooler and classifier are a few MFLOP).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/backend/cpu/executor.h"

namespace {

using kiln::backend::cpu::matmul_primitive;
using kiln::backend::cpu::matmul_primitive_bf16;
using kiln::backend::cpu::prefers_matmul_primitive;
using kiln::backend::cpu::sgemm;

// C [M, N] = op(A) op(B); `with_next`: runs side by side with the next one.
struct Product {
  std::string name;
  bool ta, tb;
  int64_t M, N, K;
  int count;  // a step
  bool with_next = false;
};

struct Buffers {
  std::vector<float> a, b, c;
  std::vector<uint16_t> a16, b16;
};

// As the CPU backend's matmul kernel dispatches a product with no bias.
void run(const Product& p, Buffers& m, bool bf16) {
  const int64_t lda = p.ta ? p.M : p.K, ldb = p.tb ? p.K : p.N;
  if (bf16) {
    if (!matmul_primitive_bf16(p.ta, p.tb, p.M, p.N, p.K, m.a16.data(), lda, m.b16.data(), ldb, m.c.data(), p.N,
                               nullptr, false)) {
      std::fprintf(stderr, "step_products: oneDNN's bf16 matmul declined %s\n", p.name.c_str());
      std::exit(1);
    }
    return;
  }
  if (!omp_in_parallel() && prefers_matmul_primitive(p.ta, p.tb, p.M, p.N, p.K) &&
      matmul_primitive(p.ta, p.tb, p.M, p.N, p.K, m.a.data(), lda, m.b.data(), ldb, m.c.data(), p.N, nullptr, false))
    return;
  if (!sgemm(p.ta, p.tb, p.M, p.N, p.K, m.a.data(), lda, m.b.data(), ldb, m.c.data(), p.N, false)) {
    std::fprintf(stderr, "step_products: oneDNN's sgemm failed for %s\n", p.name.c_str());
    std::exit(1);
  }
}

double flops(const Product& p) { return 2.0 * static_cast<double>(p.M) * p.N * p.K; }

struct Model {
  int64_t tokens;
  std::vector<Product> step;                        // forward, then backward
  std::vector<std::pair<int64_t, int64_t>> weights;  // (in, out) for the peak
};

// A model's products, layer by layer: the forward ones in order, the
// backward ones in reverse.
struct Builder {
  Model m;
  std::vector<Product> forward, backward;
  // One linear layer's three products at `tokens` rows. conv1d: weight [in,
  // out] (GPT-2); else [out, in] (nn.Linear). dX = dY · Wᵀ and dW = Xᵀ · dY
  // (conv1d) or dYᵀ · X run side by side.
  void layer(const std::string& name, int64_t in, int64_t out, int count, bool conv1d) {
    const int64_t T = m.tokens;
    forward.push_back({name + " forward", false, !conv1d, T, out, in, count});
    std::vector<Product> grads = {{name + " dX", false, conv1d, T, in, out, count, true},
                                  conv1d ? Product{name + " dW", true, false, in, out, T, count}
                                         : Product{name + " dW", true, false, out, in, T, count}};
    backward.insert(backward.begin(), grads.begin(), grads.end());
    m.weights.push_back({in, out});
  }
  Model done() {
    m.step = forward;
    m.step.insert(m.step.end(), backward.begin(), backward.end());
    return m;
  }
};

Model gpt2() {
  Builder b{{4 * 256, {}, {}}, {}, {}};
  b.layer("c_attn", 768, 2304, 12, true);
  b.layer("attn.c_proj", 768, 768, 12, true);
  b.layer("c_fc", 768, 3072, 12, true);
  b.layer("mlp.c_proj", 3072, 768, 12, true);
  // The LM head: wte [V, 768] read transposed; its gradients are not paired.
  const int64_t V = 50257, T = b.m.tokens;
  b.forward.push_back({"lm_head forward", false, true, T, V, 768, 1});
  b.backward.insert(b.backward.begin(), {{"lm_head dX", false, false, T, 768, V, 1},
                                         {"lm_head dW", true, false, V, 768, T, 1}});
  b.m.weights.push_back({768, V});
  return b.done();
}

Model bert_base() {
  Builder b{{8 * 128, {}, {}}, {}, {}};
  b.layer("query/key/value", 768, 768, 36, false);
  b.layer("attention.output", 768, 768, 12, false);
  b.layer("intermediate", 768, 3072, 12, false);
  b.layer("output", 3072, 768, 12, false);
  return b.done();
}

double seconds_of(const std::chrono::steady_clock::time_point& t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "gpt2";
  int rounds = 7;
  bool with_bf16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--bf16") {
      with_bf16 = true;
    } else if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "gpt2" || a == "bert-base") {
      which = a;
    } else {
      std::fprintf(stderr, "usage: step_products [gpt2|bert-base] [--rounds N] [--bf16]; got '%s'\n", a.c_str());
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "step_products: --rounds must be at least 1, got %d\n", rounds);
    return 2;
  }
  const Model m = which == "gpt2" ? gpt2() : bert_base();
  size_t biggest = 0;
  for (const auto& p : m.step)
    biggest = std::max<size_t>(biggest, static_cast<size_t>(std::max({p.M * p.K, p.K * p.N, p.M * p.N})));
  // Values near 1 (no denormals, no NaN): the speed of a product does not depend on them otherwise.
  Buffers buffers[2];
  for (auto& b : buffers) {
    b.a.assign(biggest, 0.01f);
    b.b.assign(biggest, 0.02f);
    b.c.assign(biggest, 0.0f);
    if (with_bf16) {
      b.a16.assign(biggest, 0x3c24);  // about 0.01
      b.b16.assign(biggest, 0x3ca4);  // about 0.02
    }
  }
  const int precisions = with_bf16 ? 2 : 1;

  // The step's products, round after round, f32 then bf16 in each round;
  // round 0 warms up (primitives are created there).
  std::vector<std::vector<double>> times[2];
  for (int b = 0; b < precisions; ++b) times[b].resize(m.step.size());
  for (int r = 0; r <= rounds; ++r)
    for (int b = 0; b < precisions; ++b)
      for (size_t i = 0; i < m.step.size(); ++i) {
        const Product& p = m.step[i];
        const auto t0 = std::chrono::steady_clock::now();
        if (p.with_next) {
#pragma omp parallel num_threads(2)
          run(m.step[i + omp_get_thread_num()], buffers[omp_get_thread_num()], b == 1);
        } else {
          run(p, buffers[0], b == 1);
        }
        if (r > 0) times[b][i].push_back(seconds_of(t0));
        if (p.with_next) ++i;
      }

  // The peak, as kiln bench measures it (NN products at the weights' shapes; best of 3 after one).
  double peak[2] = {0, 0};
  std::string peak_shape[2];
  for (int b = 0; b < precisions; ++b)
    for (auto [in, out] : m.weights) {
      const Product p{"", false, false, m.tokens, out, in, 1};
      double best = 0;
      for (int rep = 0; rep < 4; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        run(p, buffers[0], b == 1);
        if (rep > 0) best = std::max(best, flops(p) / seconds_of(t0) / 1e9);
      }
      if (best > peak[b]) {
        peak[b] = best;
        peak_shape[b] = "[" + std::to_string(m.tokens) + "x" + std::to_string(in) + "] x [" + std::to_string(in) +
                        "x" + std::to_string(out) + "]";
      }
    }

  std::printf("step_products: %s, %lld tokens, %d threads, %d rounds\n", which.c_str(),
              static_cast<long long>(m.tokens), omp_get_max_threads(), rounds);
  std::printf("  %-24s %6s %5s %5s %5s %7s  %-21s%s\n", "product", "layout", "M", "N", "K", "a step",
              "f32 GFLOP/s best/med", with_bf16 ? "  bf16 GFLOP/s best/med  bf16/f32 (median)" : "");
  double best_total[2] = {0, 0}, median_total[2] = {0, 0}, step_flops = 0;
  for (size_t i = 0; i < m.step.size(); ++i) {
    const Product& p = m.step[i];
    const double f = flops(p) + (p.with_next ? flops(m.step[i + 1]) : 0.0);
    const std::string name = p.with_next ? p.name + " + dW" : p.name;
    std::printf("  %-24s %s%s%s %5lld %5lld %5lld %6dx", name.c_str(), p.ta ? "T" : "N", p.tb ? "T" : "N",
                p.with_next ? "+TN" : "   ", static_cast<long long>(p.M), static_cast<long long>(p.N),
                static_cast<long long>(p.K), p.count);
    double med[2] = {0, 0};
    for (int b = 0; b < precisions; ++b) {
      std::vector<double> t = times[b][i];
      std::sort(t.begin(), t.end());
      med[b] = t[t.size() / 2];
      std::printf("  %8.1f / %8.1f   ", f / t.front() / 1e9, f / med[b] / 1e9);
      best_total[b] += t.front() * p.count;
      median_total[b] += med[b] * p.count;
    }
    if (with_bf16) std::printf("  %5.2fx", med[0] / med[1]);
    std::printf("\n");
    step_flops += f * p.count;
    if (p.with_next) ++i;
  }
  for (int b = 0; b < precisions; ++b) {
    const char* what = b == 0 ? "f32" : "bf16";
    const double median_gflops = step_flops / median_total[b] / 1e9;
    std::printf("  %-4s products alone %.3f s a step at best, %.3f s median (%.1f / %.1f GFLOP/s, %.1f GFLOP)\n", what,
                best_total[b], median_total[b], step_flops / best_total[b] / 1e9, median_gflops, step_flops / 1e9);
    std::printf("  %-4s GEMM peak      %.1f GFLOP/s at %s (kiln bench's: best of 3)\n", what, peak[b],
                peak_shape[b].c_str());
    std::printf("  %-4s ceiling        the products alone reach %.0f %% of the peak (median)\n", what,
                100.0 * median_gflops / peak[b]);
  }
  return 0;
}
