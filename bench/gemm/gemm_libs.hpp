// Runtime-loaded GEMM backends for bench_gemm.
//
// OpenBLAS and BLIS both export cblas_sgemm / sgemm_, so neither is linked;
// each is dlopen()ed with RTLD_LOCAL and called through a function pointer.
// oneDNN is loaded the same way so that the benchmark builds (and reports
// "not found") on machines where one of the packages is missing.
//
// All three Debian builds use libgomp, which this executable also links, so
// every library runs on the same OpenMP thread pool as kiln itself would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gemm_bench {

// One fp32 GEMM backend. All matrices are row-major:
//   C[M,N] = op(A) * op(B), op(X) = X or X^T, alpha = 1, beta = 0.
struct Backend {
  std::string name;     // short column name
  std::string detail;   // version / kernel set / path, for the header
  bool available = false;
  std::string why_unavailable;

  // Row-major sgemm with alpha=1, beta=0. Returns false on a library error.
  bool (*sgemm)(const Backend& self, bool ta, bool tb, int M, int N, int K,
                const float* A, int lda, const float* B, int ldb, float* C,
                int ldc) = nullptr;

  // Sets the number of threads the library uses for a call made outside an
  // OpenMP parallel region. Also called inside a region (per thread) with 1
  // for the "OpenMP loop over the batch" mode.
  void (*set_threads)(const Backend& self, int n) = nullptr;
  // What the library reports back (-1 if it cannot say).
  int (*get_threads)(const Backend& self) = nullptr;

  // Resolved symbols (opaque to callers).
  void* handle = nullptr;
  void* fn_gemm = nullptr;
  void* fn_set_threads = nullptr;
  void* fn_get_threads = nullptr;
};

struct LibraryPaths {
  std::string openblas;  // OpenBLAS, OpenMP flavour
  std::string onednn;
  std::string blis;      // BLIS, OpenMP flavour
};

// Paths compiled in by CMake (falling back to the Debian locations),
// overridable with the environment variables KILN_BENCH_OPENBLAS,
// KILN_BENCH_ONEDNN and KILN_BENCH_BLIS.
LibraryPaths default_library_paths();

// Loads every backend; unavailable ones have available == false.
std::vector<Backend> load_backends(const LibraryPaths& paths);

// True if some BLAS (sgemm_ / cblas_sgemm) is visible in the global symbol
// scope, which would mean that the RTLD_LOCAL isolation is not effective.
bool blas_in_global_scope();

}  // namespace gemm_bench
