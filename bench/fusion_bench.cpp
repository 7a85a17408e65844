// A fused elementwise chain against the same chain unfused, in one run.
// Unfused = eager mode: each op is its own kernel writing its own buffer,
// as an eager framework runs it. The chain is BERT's bias + GELU + residual +
// dropout-free scale on a [B*T, 3072] activation.
//
//   build/bin/fusion_bench [--rows 1024] [--cols 3072] [--iters 50]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/kiln.h"

using namespace kiln;

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  int64_t rows = 1024, cols = 3072;
  int iters = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--rows") rows = std::stoll(argv[i + 1]);
    else if (f == "--cols") cols = std::stoll(argv[i + 1]);
    else if (f == "--iters") iters = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "fusion_bench: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
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
