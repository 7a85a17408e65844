#pragma once
// Comparing the outputs kiln samples with transformers' over many seeds: the
// generators differ, so the tests compare distributions of outputs (count
// tables keyed by the generated ids), not ids.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kiln/core/json.h"

namespace kiln::testing {

// Total variation distance between the frequencies of two count tables (na and nb draws).
inline double tvd(const std::map<std::string, int64_t>& a, int64_t na, const std::map<std::string, int64_t>& b,
                  int64_t nb) {
  std::set<std::string> keys;
  for (const auto& [k, v] : a) keys.insert(k);
  for (const auto& [k, v] : b) keys.insert(k);
  const auto freq = [](const std::map<std::string, int64_t>& m, const std::string& k, int64_t n) {
    return m.count(k) ? static_cast<double>(m.at(k)) / static_cast<double>(n) : 0.0;
  };
  double d = 0;
  for (const auto& k : keys) d += std::abs(freq(a, k, na) - freq(b, k, nb));
  return d / 2;
}

// The distance a sample of n_ours and one of `reference` (n draws) from the same distribution land apart on
// average: per outcome of probability p, E|difference of frequencies| = sqrt(p (1 - p) (1 / n_ours + 1 / n))
// * sqrt(2 / pi).
inline double chance_tvd(const std::map<std::string, int64_t>& reference, int64_t n, int64_t n_ours) {
  double chance = 0;
  for (const auto& [k, count] : reference) {
    const double p = static_cast<double>(count) / static_cast<double>(n);
    chance += std::sqrt(p * (1 - p) * (1.0 / static_cast<double>(n_ours) + 1.0 / static_cast<double>(n))) *
              std::sqrt(2 / M_PI) / 2;
  }
  return chance;
}

// A count table's key: the ids generated after the prompt, space-separated.
inline std::string continuation_key(const std::vector<int64_t>& seq, size_t prompt_size) {
  std::string key;
  for (size_t i = prompt_size; i < seq.size(); ++i) key += (key.empty() ? "" : " ") + std::to_string(seq[i]);
  return key;
}

// kiln's counts `ours` (n_ours draws) within three times the distance chance
// puts between them and the golden case's transformers counts ("counts" over
// "seeds" draws); prints the distance under `what`.
inline void expect_like_transformers(const nlohmann::json& c, const std::map<std::string, int64_t>& ours,
                                     int64_t n_ours, const char* what) {
  std::map<std::string, int64_t> hf;
  for (const auto& [k, v] : c["counts"].items()) hf[k] = v.get<int64_t>();
  const int64_t n = c["seeds"];
  const double chance = chance_tvd(hf, n, n_ours);
  const double d = tvd(hf, n, ours, n_ours);
  EXPECT_LT(d, 3 * chance) << "by chance about " << chance << " (transformers' two runs: " << c["self_tvd"] << ")";
  std::printf("%s %s: total variation distance to transformers %.4f (chance %.4f)\n", what,
              c["generate"].dump().c_str(), d, chance);
}

}  // namespace kiln::testing
