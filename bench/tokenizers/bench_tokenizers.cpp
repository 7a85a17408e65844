// bench_tokenizers --model DIR [--model DIR ...] --corpus FILE [--repeat N]
// Encodes every line of FILE with each model, single-threaded and with all
// cores (encode_batch, OpenMP), and prints one JSON line per measurement:
//   {"impl":"kiln","model":...,"threads":T,"lines":L,"tokens":N,"seconds":S,
//    "tokens_per_s":...,"mb_per_s":...}
// run_bench.sh runs it side by side with the Node implementations.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/tokenizers/tokenizer.h"

using kiln::tokenizers::Tokenizer;

namespace {

double now() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

void report(const std::string& model, int threads, size_t lines, size_t tokens, size_t bytes,
            double seconds) {
  std::printf(
      "{\"impl\":\"kiln\",\"model\":\"%s\",\"threads\":%d,\"lines\":%zu,\"tokens\":%zu,"
      "\"seconds\":%.3f,\"tokens_per_s\":%.0f,\"mb_per_s\":%.2f}\n",
      model.c_str(), threads, lines, tokens, seconds, tokens / seconds, bytes / seconds / 1e6);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  std::string corpus;
  int repeat = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--model") models.push_back(argv[i + 1]);
    else if (flag == "--corpus") corpus = argv[i + 1];
    else if (flag == "--repeat") repeat = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "bench_tokenizers: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (models.empty() || corpus.empty()) {
    std::fprintf(stderr, "usage: bench_tokenizers --model DIR [--model DIR] --corpus FILE [--repeat N]\n");
    return 2;
  }
  std::ifstream in(corpus, std::ios::binary);
  std::vector<std::string> lines;
  size_t bytes = 0;
  for (std::string l; std::getline(in, l);) {
    bytes += l.size();
    lines.push_back(std::move(l));
  }
  const int cores = omp_get_max_threads();
  for (const auto& dir : models) {
    std::string name = std::filesystem::path(dir).filename().string();
    Tokenizer tok = Tokenizer::from_pretrained(dir);
    tok.encode_batch(std::vector<std::string>(lines.begin(), lines.begin() + std::min<size_t>(lines.size(), 1000)));
    for (int threads : {1, cores}) {
      omp_set_num_threads(threads);
      double best = 1e30;
      size_t tokens = 0;
      for (int r = 0; r < repeat; ++r) {
        double t0 = now();
        auto enc = tok.encode_batch(lines);
        double t = now() - t0;
        tokens = 0;
        for (const auto& e : enc) tokens += e.size();
        best = std::min(best, t);
      }
      report(name, threads, lines.size(), tokens, bytes, best);
    }
  }
  return 0;
}
