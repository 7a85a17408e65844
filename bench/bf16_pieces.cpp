// bf16_pieces: the bf16 products oneDNN 2.6 runs far under its peak in one
// call, timed whole and in the pieces the CPU backend splits them into
// (gemm_primitive.cpp), side by side in one run: the LM head's weight
// gradient (Tᵀ·N, V rows) and input gradient (N·N over a V-long reduction)
// at GPT-2's and Llama's vocabularies, and shapes near the thresholds.
//
//   bf16_pieces [--rounds N]
//
// Prints GFLOP/s (median over the rounds) whole and in pieces, and their
// ratio. Needs a CPU with bf16 products (AVX512-BF16 or AMX).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/backend/cpu/executor.h"

namespace {

using kiln::backend::cpu::matmul_primitive_bf16;

struct Shape {
  const char* what;
  bool ta, tb;
  int64_t M, N, K;
};

double median_seconds(const Shape& s, std::vector<uint16_t>& a, std::vector<uint16_t>& b, std::vector<float>& c,
                      int rounds) {
  const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  auto once = [&] {
    if (!matmul_primitive_bf16(s.ta, s.tb, s.M, s.N, s.K, a.data(), lda, b.data(), ldb, c.data(), s.N, nullptr,
                               false)) {
      std::fprintf(stderr, "bf16_pieces: oneDNN's bf16 matmul declined %s\n", s.what);
      std::exit(1);
    }
  };
  once();  // makes the primitives
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    const auto start = std::chrono::steady_clock::now();
    once();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bf16_pieces [--rounds N]\n");
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "bf16_pieces: --rounds must be at least 1\n");
    return 2;
  }
  if (!kiln::backend::cpu::native_bf16_products()) {
    std::fprintf(stderr, "bf16_pieces: this CPU has no bf16 products (AVX512-BF16 or AMX)\n");
    return 1;
  }
  const Shape shapes[] = {
      {"GPT-2 LM head dW", true, false, 50257, 768, 1024},  {"GPT-2 LM head dX", false, false, 1024, 768, 50257},
      {"Llama LM head dW", true, false, 32000, 4096, 512},  {"Llama LM head dX", false, false, 512, 4096, 32000},
      {"TN, 12000 rows", true, false, 12000, 768, 1024},   {"TN, 32768 rows", true, false, 32768, 768, 1024},
      {"NT, K=16384", false, true, 1024, 768, 16384},       {"NN, K=16384", false, false, 1024, 768, 16384},
  };
  size_t most = 0;
  for (const Shape& s : shapes) most = std::max<size_t>(most, std::max({s.M * s.K, s.K * s.N, s.M * s.N}));
  std::vector<uint16_t> a(most, 0x3f80), b(most, 0x3c00);  // 1.0 and 2^-7: finite sums
  std::vector<float> c(most);
  std::printf("bf16_pieces: %d rounds, median GFLOP/s\n", rounds);
  std::printf("  %-20s %-6s %6s %6s %6s %8s %8s %7s\n", "product", "layout", "M", "N", "K", "whole", "pieces",
              "ratio");
  for (const Shape& s : shapes) {
    const double flop = 2.0 * static_cast<double>(s.M) * s.N * s.K;
    kiln::backend::cpu::set_bf16_product_pieces(false);
    const double whole = median_seconds(s, a, b, c, rounds);
    kiln::backend::cpu::set_bf16_product_pieces(true);
    const double pieces = median_seconds(s, a, b, c, rounds);
    std::printf("  %-20s %c%c     %6ld %6ld %6ld %8.0f %8.0f %6.2fx\n", s.what, s.ta ? 'T' : 'N', s.tb ? 'T' : 'N',
                static_cast<long>(s.M), static_cast<long>(s.N), static_cast<long>(s.K), flop / whole / 1e9,
                flop / pieces / 1e9, whole / pieces);
  }
  return 0;
}
