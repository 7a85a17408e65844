#pragma once
// Device helpers shared by the kernel families (kernels_*.cu): launch
// shapes, index reads, error reports and block reductions. Correct first:
// one block per row for row-wise ops, one thread per element elsewhere.
// Reductions run in a fixed order (per-thread strided partials, then a fixed
// tree), so results are bit-identical from run to run; sums accumulate in
// double as on the CPU.
#include <cuda_runtime.h>

#include <cstdint>

#include "kiln/backend/cuda/desc.h"
#include "kiln/backend/cuda/kernels.h"

namespace kiln::backend::cuda::kernels {

constexpr int kThreads = 256;  // every block; a multiple of 32

inline unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < (1 << 20) ? blocks : (1 << 20));  // grid-stride loops do the rest
}

inline unsigned grid_rows(int64_t rows) {
  if (rows < 1) rows = 1;
  return static_cast<unsigned>(rows < (1 << 20) ? rows : (1 << 20));
}

__device__ inline int64_t read_id(const void* ids, uint8_t dtype, int64_t i) {
  return dtype == kI64 ? static_cast<const int64_t*>(ids)[i] : static_cast<const int32_t*>(ids)[i];
}

__device__ inline void report_error(ErrorReport* r, int32_t code, int64_t value, int64_t position, int64_t limit) {
  if (atomicCAS(&r->code, 0, -1) == 0) {
    r->value = value;
    r->position = position;
    r->limit = limit;
    __threadfence();
    atomicExch(&r->code, code);
  }
}

template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};
template <typename T>
struct MinOp {
  __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};
template <typename T>
struct MaxOp {  // std::max: a NaN in `a` stays, a NaN in `b` is passed over
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};

// Every thread's partial combined in a fixed order; every thread gets the
// result. Must be reached by the whole block.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T warp_partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T acc = warp_partial[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) acc = op(acc, warp_partial[w]);
    warp_partial[0] = acc;
  }
  __syncthreads();
  T r = warp_partial[0];
  __syncthreads();  // the buffer may be reused at once
  return r;
}

__device__ inline double block_sum(double v) { return block_reduce(v, SumOp<double>()); }
__device__ inline float block_max(float v) { return block_reduce(v, MaxOp<float>()); }

}  // namespace kiln::backend::cuda::kernels
