// cuBLAS and NVRTC opened on first use (libraries.h), by their sonames (the
// loader's search: LD_LIBRARY_PATH, the system's library cache), else in
// the directory the build found them in.
#include "kiln/backend/cuda/libraries.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "kiln/core/error.h"

// Set by src/kiln/CMakeLists.txt from the toolkit kiln was built with.
#ifndef KILN_CUBLAS_SONAME
#error "KILN_CUBLAS_SONAME (e.g. libcublas.so.13) is set by the build"
#endif

namespace kiln::backend::cuda {

namespace {

// A symbol's name after cublas_v2.h's macros (cublasCreate is cublasCreate_v2).
#define KILN_SYMBOL_NAME(f) KILN_SYMBOL_TEXT(f)
#define KILN_SYMBOL_TEXT(f) #f

class Library {
 public:
  // `purpose`: what the backend uses it for, for the error.
  Library(const char* soname, const char* purpose) : name_(soname) {
    handle_ = ::dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const std::string first = loader_error();
      const std::string path = std::string(KILN_CUDA_LIBRARY_DIR) + "/" + soname;
      handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle_)
        throw Error("cuda: cannot load " + name_ + " (the CUDA backend's " + purpose + "): " + first +
                    "; and from the build's CUDA toolkit: " + loader_error());
    }
  }

  // The function `name` as type F (its declaration in the library's header).
  template <typename F>
  F function(const char* name) const {
    ::dlerror();
    void* f = ::dlsym(handle_, name);
    if (!f) throw Error("cuda: " + name_ + " has no function " + name + " (a CUDA toolkit older than kiln's build?)");
    return reinterpret_cast<F>(f);
  }

 private:
  static std::string loader_error() {
    const char* e = ::dlerror();
    return e ? e : "no reason given";
  }
  std::string name_;
  void* handle_ = nullptr;  // kept open for the process
};

#define KILN_RESOLVE(lib, field, f) field = lib.function<decltype(field)>(KILN_SYMBOL_NAME(f))

// The header declares the products with exactly these types (checked
// unevaluated: naming their address would link the library).
static_assert(sizeof(static_cast<Cublas::GemmEx>(&::cublasGemmEx)) != 0);
static_assert(sizeof(static_cast<Cublas::GemmStridedBatchedEx>(&::cublasGemmStridedBatchedEx)) != 0);

Cublas open_cublas() {
  const Library lib(KILN_CUBLAS_SONAME, "matrix products");
  Cublas c{};
  KILN_RESOLVE(lib, c.create, cublasCreate);
  KILN_RESOLVE(lib, c.set_stream, cublasSetStream);
  KILN_RESOLVE(lib, c.set_math_mode, cublasSetMathMode);
  KILN_RESOLVE(lib, c.set_workspace, cublasSetWorkspace);
  KILN_RESOLVE(lib, c.gemm_ex, cublasGemmEx);
  KILN_RESOLVE(lib, c.gemm_strided_batched_ex, cublasGemmStridedBatchedEx);
  KILN_RESOLVE(lib, c.status_string, cublasGetStatusString);
  KILN_RESOLVE(lib, c.status_name, cublasGetStatusName);
  return c;
}

Nvrtc open_nvrtc() {
  const Library lib(KILN_NVRTC_SONAME, "kernel compiler");
  Nvrtc n{};
  KILN_RESOLVE(lib, n.version, nvrtcVersion);
  KILN_RESOLVE(lib, n.create_program, nvrtcCreateProgram);
  KILN_RESOLVE(lib, n.compile_program, nvrtcCompileProgram);
  KILN_RESOLVE(lib, n.destroy_program, nvrtcDestroyProgram);
  KILN_RESOLVE(lib, n.program_log_size, nvrtcGetProgramLogSize);
  KILN_RESOLVE(lib, n.program_log, nvrtcGetProgramLog);
  KILN_RESOLVE(lib, n.cubin_size, nvrtcGetCUBINSize);
  KILN_RESOLVE(lib, n.cubin, nvrtcGetCUBIN);
  KILN_RESOLVE(lib, n.error_string, nvrtcGetErrorString);
  return n;
}

// Opened once; a failure is thrown to every caller (a missing library stays missing).
template <typename T, T (*open)()>
const T& opened() {
  static std::once_flag once;
  static T table{};
  static std::string failure;
  std::call_once(once, [] {
    try {
      table = open();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
  return table;
}

}  // namespace

const Cublas& cublas() { return opened<Cublas, open_cublas>(); }
const Nvrtc& nvrtc() { return opened<Nvrtc, open_nvrtc>(); }

}  // namespace kiln::backend::cuda
