// T5 generation tokens/s with and without the key/value cache, greedy, on a
// randomly initialised preset (fp32, CPU). Prints JSON lines.
//
//   t5_generate_bench [--preset t5-tiny] [--batch 1] [--prompt_len 16] [--new_tokens 32]
#include <chrono>
#include <cstdio>
#include <map>
#include <string>

#include "kiln/kiln.h"
#include "kiln/models/generation.h"
#include "kiln/models/t5.h"

using namespace kiln;

int main(int argc, char** argv) try {
  std::string preset = "t5-tiny";
  std::map<std::string, int64_t> a = {{"batch", 1}, {"prompt_len", 16}, {"new_tokens", 32}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = std::string(argv[i]).substr(2);
    if (k == "preset") {
      preset = argv[i + 1];
      continue;
    }
    KILN_CHECK(a.count(k), "t5_generate_bench: unknown flag ", argv[i]);
    a[k] = std::stoll(argv[i + 1]);
  }
  auto config = models::preset_config(preset);
  KILN_CHECK(config && config->model_type == "t5", "t5_generate_bench: '", preset, "' is not a T5 preset");
  auto model = models::create_model("T5ForConditionalGeneration", *config, 0);
  auto& t5 = dynamic_cast<models::T5ForTask&>(*model);
  const int64_t V = t5.t5_config().vocab_size;
  std::vector<std::vector<int64_t>> prompts(a["batch"]);
  for (int64_t b = 0; b < a["batch"]; ++b) {
    for (int64_t i = 0; i + 1 < a["prompt_len"]; ++i) prompts[b].push_back(100 + (b * 131 + i * 7919) % (V - 100));
    prompts[b].push_back(1);  // </s>
  }
  models::GenerationConfig g;
  g.max_new_tokens = a["new_tokens"];
  g.eos_token_ids = {-1};  // always the full length
  for (bool cache : {true, false}) {
    g.use_cache = cache;
    models::GenerationConfig warm = g;
    warm.max_new_tokens = 2;
    models::generate(t5, prompts, warm);
    metrics::reset();
    auto t0 = std::chrono::steady_clock::now();
    auto out = models::generate(t5, prompts, g);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics::Snapshot m = metrics::snapshot();
    std::printf("{\"preset\": \"%s\", \"generation\": \"%s\", \"batch\": %lld, \"new_tokens\": %lld, "
                "\"tokens_per_s\": %.1f, \"compiles\": %lld, \"execute_s\": %.3f}\n",
                preset.c_str(), cache ? "kv-cache" : "no-cache", (long long)a["batch"], (long long)g.max_new_tokens,
                static_cast<double>(out.size() * out[0].size()) / s, (long long)m.compiles, m.execute_seconds);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "t5_generate_bench: error: %s\n", e.what());
  return 1;
}
