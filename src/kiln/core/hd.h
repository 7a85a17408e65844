#pragma once
// KILN_HD marks functions that the CUDA backend's kernels and host code
// (the CPU backend, the tests) share: __host__ __device__ under nvcc,
// nothing elsewhere.
#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif
