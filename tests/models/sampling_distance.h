#pragma once
// Comparing the outputs kiln samples with transformers' over many seeds: the
// generators differ, so the tests compare distributions of outputs (count
// tables keyed by the generated ids), not ids.
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <string>

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

}  // namespace kiln::testing
