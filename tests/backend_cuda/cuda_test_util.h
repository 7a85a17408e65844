#pragma once
// Shared by the CUDA backend's tests.
#include <cstdint>
#include <random>
#include <vector>

namespace kiln::testing {

// n uniform values in [lo, hi), the same for a seed on every machine.
inline std::vector<float> uniform_values(int64_t n, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace kiln::testing
