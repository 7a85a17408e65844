#pragma once
// Philox4x32-10's block function and the maps from its words to floats:
// shared by the CPU backend (cpu/philox.h) and the CUDA kernels, so both draw
// the same numbers for the same (seed, offset, index). Plain scalar code, no
// library calls but sqrt/log/cos on doubles.
#include <math.h>

#include <cstdint>

#include "kiln/core/hd.h"

namespace kiln::backend {

KILN_HD inline void philox_round(uint32_t c[4], const uint32_t k[2]) {
  constexpr uint64_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  uint64_t p0 = M0 * c[0], p1 = M1 * c[2];
  uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
  uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
  c[0] = hi1 ^ c[1] ^ k[0];
  c[1] = lo1;
  c[2] = hi0 ^ c[3] ^ k[1];
  c[3] = lo0;
}

// The four 32-bit words of block `block` of the stream (seed, offset).
KILN_HD inline void philox_block(uint64_t seed, uint64_t offset, uint64_t block, uint32_t out[4]) {
  uint32_t c[4] = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), static_cast<uint32_t>(offset),
                   static_cast<uint32_t>(offset >> 32)};
  uint32_t k[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  for (int r = 0; r < 10; ++r) {
    philox_round(c, k);
    k[0] += 0x9E3779B9u;
    k[1] += 0xBB67AE85u;
  }
  for (int i = 0; i < 4; ++i) out[i] = c[i];
}

// U[0, 1) with 24 bits.
KILN_HD inline float philox_to_uniform(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }

// N(0, 1) by Box-Muller on two words, in double. (The CUDA device's double
// log/cos may differ from glibc's in the last bit; rounding to float hides
// that in all but about one element in 10^8.)
KILN_HD inline float philox_to_normal(uint32_t a, uint32_t b) {
  constexpr double kTwoPi = 2.0 * 3.14159265358979323846;  // as 2.0 * M_PI
  double u1 = (static_cast<double>(a) + 1.0) / 4294967296.0;  // (0, 1]
  double u2 = static_cast<double>(b) / 4294967296.0;
  return static_cast<float>(::sqrt(-2.0 * ::log(u1)) * ::cos(kTwoPi * u2));
}

// Element `index` of a stream: word index % 4 of block index / 4 (uniform),
// the pair index % 2 of block index / 2 (normal).
KILN_HD inline float philox_uniform(uint64_t seed, uint64_t offset, uint64_t index) {
  uint32_t w[4];
  philox_block(seed, offset, index >> 2, w);
  return philox_to_uniform(w[index & 3]);
}
KILN_HD inline float philox_normal(uint64_t seed, uint64_t offset, uint64_t index) {
  uint32_t w[4];
  philox_block(seed, offset, index >> 1, w);
  return philox_to_normal(w[2 * (index & 1)], w[2 * (index & 1) + 1]);
}

}  // namespace kiln::backend
