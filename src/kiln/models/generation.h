#pragma once
// Text generation for causal LMs (GPT-2): greedy or sampling (temperature,
// top-k, top-p), stopping at EOS. With the key/value cache each new token is
// one decode step whose graph depends only on the cache capacity (prompt +
// new tokens rounded up to a bucket), so it compiles once per bucket, not once
// per token.
#include <cstdint>
#include <optional>
#include <vector>

#include "kiln/models/gpt2.h"

namespace kiln::models {

struct GenerationConfig {
  int64_t max_new_tokens = 20;
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;    // 0 = off
  double top_p = 1.0;   // 1 = off
  uint64_t seed = 0;
  std::optional<int64_t> eos_token_id;  // default: the config's
  bool use_cache = true;
  int64_t bucket = 64;  // cache capacity granularity
};

// Continues each prompt (token ids); returns prompt + generated ids per prompt.
std::vector<std::vector<int64_t>> generate(GPT2ForTask& model, const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& config);

}  // namespace kiln::models
