#pragma once
// bfloat16 <-> float, shared by the host, the CUDA kernels and the kernels
// NVRTC compiles (no standard library here). A bf16 value is the top half of
// an f32: converting to float is exact; converting from float rounds to the
// nearest bf16, ties to even, as PyTorch and CUDA's __float2bfloat16 do.
// NaN stays NaN (quiet); values beyond bf16's range round to ±inf.
#include <cstdint>

#include "kiln/core/hd.h"

namespace kiln {

KILN_HD inline uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  __builtin_memcpy(&u, &x, sizeof u);
  return u;
#endif
}

KILN_HD inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  __builtin_memcpy(&x, &u, sizeof x);
  return x;
#endif
}

KILN_HD inline uint16_t bf16_from_float(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

KILN_HD inline float bf16_to_float(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// x rounded to the nearest bf16 value, as a float.
KILN_HD inline float round_to_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

}  // namespace kiln
