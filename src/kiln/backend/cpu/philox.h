#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3"): a counter-based generator. Element i of a random tensor depends only
// on (seed, offset, i), so streams are reproducible whatever the number of
// threads or replicas.
#include <cmath>
#include <cstdint>

namespace kiln::backend::cpu {

struct Philox {
  static inline void round(uint32_t c[4], uint32_t k[2]) {
    constexpr uint64_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
    uint64_t p0 = M0 * c[0], p1 = M1 * c[2];
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c[0] = hi1 ^ c[1] ^ k[0];
    c[1] = lo1;
    c[2] = hi0 ^ c[3] ^ k[1];
    c[3] = lo0;
  }
  // Four 32-bit random words for element `index` of the stream (seed, offset).
  static inline void generate(uint64_t seed, uint64_t offset, uint64_t index, uint32_t out[4]) {
    uint32_t c[4] = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                     static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)};
    uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
    for (int r = 0; r < 10; ++r) {
      round(c, k);
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    for (int i = 0; i < 4; ++i) out[i] = c[i];
  }
  // U[0, 1) with 24 bits.
  static inline float uniform(uint64_t seed, uint64_t offset, uint64_t index) {
    uint32_t w[4];
    generate(seed, offset, index, w);
    return static_cast<float>(w[0] >> 8) * (1.0f / 16777216.0f);
  }
  // N(0, 1) by Box-Muller on two words.
  static inline float normal(uint64_t seed, uint64_t offset, uint64_t index) {
    uint32_t w[4];
    generate(seed, offset, index, w);
    double u1 = (static_cast<double>(w[0]) + 1.0) / 4294967296.0;  // (0, 1]
    double u2 = static_cast<double>(w[1]) / 4294967296.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
};

}  // namespace kiln::backend::cpu
