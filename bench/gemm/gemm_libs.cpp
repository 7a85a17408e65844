// dlopen()-based loading of OpenBLAS, oneDNN and BLIS for bench_gemm.
#include "gemm_libs.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

// When the headers are around, check the hand-written signatures below
// against them at compile time. (Nothing is linked from them.)
#if __has_include(<oneapi/dnnl/dnnl.h>) && __has_include(<oneapi/dnnl/dnnl_debug.h>)
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#define GEMM_BENCH_HAVE_DNNL_H 1
#endif

#ifndef KILN_BENCH_OPENBLAS_PATH
#define KILN_BENCH_OPENBLAS_PATH "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"
#endif
#ifndef KILN_BENCH_BLIS_PATH
#define KILN_BENCH_BLIS_PATH "/usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so.4"
#endif
#ifndef KILN_BENCH_ONEDNN_PATH
#define KILN_BENCH_ONEDNN_PATH "libdnnl.so.2"
#endif

namespace gemm_bench {
namespace {

// ---- C ABI of the entry points we use ---------------------------------------

// CBLAS (OpenBLAS libopenblas.so.0 and Debian's libblis.so.4 both use 32-bit
// integers; the enums are passed as int).
constexpr int kCblasRowMajor = 101;
constexpr int kCblasNoTrans = 111;
constexpr int kCblasTrans = 112;
using cblas_sgemm_fn = void (*)(int order, int ta, int tb, int M, int N, int K,
                                float alpha, const float* A, int lda,
                                const float* B, int ldb, float beta, float* C,
                                int ldc);

using openblas_set_fn = void (*)(int);
using openblas_get_fn = int (*)(void);
using openblas_str_fn = char* (*)(void);

using blis_set_fn = void (*)(int64_t);   // dim_t is 64-bit on LP64
using blis_get_fn = int64_t (*)(void);
using blis_arch_id_fn = int (*)(void);   // arch_t is an enum
using blis_arch_str_fn = char* (*)(int);
using blis_str_fn = char* (*)(void);
using blis_int_fn = int64_t (*)(void);   // gint_t

// oneDNN: row-major sgemm, 64-bit dims, returns dnnl_status_t (0 = success).
using dnnl_sgemm_fn = int (*)(char ta, char tb, int64_t M, int64_t N, int64_t K,
                              float alpha, const float* A, int64_t lda,
                              const float* B, int64_t ldb, float beta, float* C,
                              int64_t ldc);
struct dnnl_version_abi {
  int major, minor, patch;
  const char* hash;
  unsigned cpu_runtime, gpu_runtime;
};
using dnnl_version_fn = const dnnl_version_abi* (*)(void);
using dnnl_isa_fn = int (*)(void);
using dnnl_isa2str_fn = const char* (*)(int);

#ifdef GEMM_BENCH_HAVE_DNNL_H
static_assert(sizeof(dnnl_dim_t) == sizeof(int64_t));
static_assert(sizeof(dnnl_status_t) == sizeof(int) && dnnl_success == 0);
static_assert(sizeof(dnnl_version_t) == sizeof(dnnl_version_abi));
static_assert(DNNL_RUNTIME_OMP == 2u);
#endif

template <class F>
F sym(void* h, const char* name) {
  return reinterpret_cast<F>(dlsym(h, name));
}

void* open_local(const std::string& path, std::string& err) {
  dlerror();
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    err = e ? e : ("cannot dlopen " + path);
  }
  return h;
}

std::string env_or(const char* var, const char* fallback) {
  const char* v = std::getenv(var);
  return (v && *v) ? v : fallback;
}

// ---- CBLAS-style backends (OpenBLAS, BLIS) ----------------------------------

bool cblas_call(const Backend& self, bool ta, bool tb, int M, int N, int K,
                const float* A, int lda, const float* B, int ldb, float* C,
                int ldc) {
  auto f = reinterpret_cast<cblas_sgemm_fn>(self.fn_gemm);
  f(kCblasRowMajor, ta ? kCblasTrans : kCblasNoTrans,
    tb ? kCblasTrans : kCblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C,
    ldc);
  return true;
}

void openblas_set(const Backend& self, int n) {
  // OpenMP build: this also calls omp_set_num_threads(n) on the calling
  // thread, and inside a parallel region OpenBLAS runs single-threaded.
  reinterpret_cast<openblas_set_fn>(self.fn_set_threads)(n);
}
int openblas_get(const Backend& self) {
  return reinterpret_cast<openblas_get_fn>(self.fn_get_threads)();
}

void blis_set(const Backend& self, int n) {
  reinterpret_cast<blis_set_fn>(self.fn_set_threads)(n);
}
int blis_get(const Backend& self) {
  return static_cast<int>(reinterpret_cast<blis_get_fn>(self.fn_get_threads)());
}

Backend load_openblas(const std::string& path) {
  Backend b;
  b.name = "OpenBLAS";
  b.handle = open_local(path, b.why_unavailable);
  if (!b.handle) return b;
  b.fn_gemm = dlsym(b.handle, "cblas_sgemm");
  b.fn_set_threads = dlsym(b.handle, "openblas_set_num_threads");
  b.fn_get_threads = dlsym(b.handle, "openblas_get_num_threads");
  if (!b.fn_gemm || !b.fn_set_threads || !b.fn_get_threads) {
    b.why_unavailable = "missing cblas_sgemm/openblas_*_num_threads in " + path;
    return b;
  }
  b.sgemm = cblas_call;
  b.set_threads = openblas_set;
  b.get_threads = openblas_get;
  std::string d = path;
  if (auto cfg = sym<openblas_str_fn>(b.handle, "openblas_get_config")) d = std::string(cfg()) + " | " + d;
  if (auto core = sym<openblas_str_fn>(b.handle, "openblas_get_corename")) d = "core=" + std::string(core()) + " | " + d;
  if (auto par = sym<openblas_get_fn>(b.handle, "openblas_get_parallel")) {
    int p = par();  // 0 = sequential, 1 = pthreads, 2 = OpenMP
    d = std::string(p == 2 ? "OpenMP" : p == 1 ? "pthreads" : "sequential") + " | " + d;
    if (p != 2) std::fprintf(stderr, "warning: %s is not the OpenMP build of OpenBLAS\n", path.c_str());
  }
  b.detail = d;
  b.available = true;
  return b;
}

Backend load_blis(const std::string& path) {
  Backend b;
  b.name = "BLIS";
  b.handle = open_local(path, b.why_unavailable);
  if (!b.handle) return b;
  b.fn_gemm = dlsym(b.handle, "cblas_sgemm");
  b.fn_set_threads = dlsym(b.handle, "bli_thread_set_num_threads");
  b.fn_get_threads = dlsym(b.handle, "bli_thread_get_num_threads");
  if (!b.fn_gemm || !b.fn_set_threads || !b.fn_get_threads) {
    b.why_unavailable = "missing cblas_sgemm/bli_thread_*_num_threads in " + path;
    return b;
  }
  if (auto bits = sym<blis_int_fn>(b.handle, "bli_info_get_blas_int_type_size")) {
    if (bits() != 32) {
      b.why_unavailable = path + " uses " + std::to_string(bits()) + "-bit BLAS integers";
      return b;
    }
  }
  b.sgemm = cblas_call;
  b.set_threads = blis_set;
  b.get_threads = blis_get;
  std::string d;
  if (auto ver = sym<blis_str_fn>(b.handle, "bli_info_get_version_str")) d += std::string(ver()) + " | ";
  auto arch_id = sym<blis_arch_id_fn>(b.handle, "bli_arch_query_id");
  auto arch_str = sym<blis_arch_str_fn>(b.handle, "bli_arch_string");
  if (arch_id && arch_str) d += "arch=" + std::string(arch_str(arch_id())) + " | ";
  if (auto omp = sym<blis_int_fn>(b.handle, "bli_info_get_enable_openmp")) d += omp() ? "OpenMP | " : "no OpenMP | ";
  b.detail = d + path;
  b.available = true;
  return b;
}

// ---- oneDNN ------------------------------------------------------------------

bool dnnl_call(const Backend& self, bool ta, bool tb, int M, int N, int K,
               const float* A, int lda, const float* B, int ldb, float* C,
               int ldc) {
  auto f = reinterpret_cast<dnnl_sgemm_fn>(self.fn_gemm);
  // dnnl_sgemm is row-major (since oneDNN 1.0), like the rest of this file.
  return f(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f,
           C, ldc) == 0;
}

// oneDNN (OpenMP runtime) has no thread setter of its own: it uses
// omp_get_max_threads() of the calling thread, and one thread when called
// from inside a parallel region. bench_gemm sets omp_set_num_threads().
void dnnl_set(const Backend&, int) {}
int dnnl_get(const Backend&) { return -1; }

Backend load_onednn(const std::string& path) {
  Backend b;
  b.name = "oneDNN";
  b.handle = open_local(path, b.why_unavailable);
  if (!b.handle) return b;
  b.fn_gemm = dlsym(b.handle, "dnnl_sgemm");
  if (!b.fn_gemm) {
    b.why_unavailable = "missing dnnl_sgemm in " + path;
    return b;
  }
  b.sgemm = dnnl_call;
  b.set_threads = dnnl_set;
  b.get_threads = dnnl_get;
  std::string d;
  if (auto ver = sym<dnnl_version_fn>(b.handle, "dnnl_version")) {
    const dnnl_version_abi* v = ver();
    d += std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    d += v->cpu_runtime == 2u ? " OpenMP" : " cpu_runtime=" + std::to_string(v->cpu_runtime);
    if (v->cpu_runtime != 2u) std::fprintf(stderr, "warning: oneDNN is not built with the OpenMP runtime\n");
    d += " | ";
  }
  auto isa = sym<dnnl_isa_fn>(b.handle, "dnnl_get_effective_cpu_isa");
  auto isa2str = sym<dnnl_isa2str_fn>(b.handle, "dnnl_cpu_isa2str");
  if (isa && isa2str) d += "isa=" + std::string(isa2str(isa())) + " | ";
  b.detail = d + path;
  b.available = true;
  return b;
}

}  // namespace

LibraryPaths default_library_paths() {
  return LibraryPaths{
      env_or("KILN_BENCH_OPENBLAS", KILN_BENCH_OPENBLAS_PATH),
      env_or("KILN_BENCH_ONEDNN", KILN_BENCH_ONEDNN_PATH),
      env_or("KILN_BENCH_BLIS", KILN_BENCH_BLIS_PATH),
  };
}

std::vector<Backend> load_backends(const LibraryPaths& p) {
  std::vector<Backend> v;
  v.push_back(load_openblas(p.openblas));
  v.push_back(load_onednn(p.onednn));
  v.push_back(load_blis(p.blis));
  return v;
}

bool blas_in_global_scope() {
  return dlsym(RTLD_DEFAULT, "sgemm_") != nullptr ||
         dlsym(RTLD_DEFAULT, "cblas_sgemm") != nullptr;
}

}  // namespace gemm_bench
