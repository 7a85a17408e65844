#pragma once
// cuBLAS and NVRTC, opened when the CUDA backend first calls them. Linked at
// build time they load with every kiln process, GPU or not: cuBLAS (with
// the cuBLASLt it needs) and NVRTC put ~180 MB into resident memory and
// ~0.08 s into the start of every command on a CPU-only machine, before
// main(). The CUDA runtime itself (a few MB) stays linked: nvcc's kernels
// register with it as the program starts.
#include <cublas_v2.h>
#include <nvrtc.h>

namespace kiln::backend::cuda {

// The cuBLAS functions the backend calls (the names cublas_v2.h maps them
// to), resolved from the library on the first call of cublas(), which
// throws kiln::Error naming the library and the loader's reason when it
// cannot be opened or lacks one of them.
struct Cublas {
  // (The two products are overloaded in C++: the int-sized declarations.)
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                    const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                                  const void*, const void*, cudaDataType, int, long long, const void*,
                                                  cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                                  long long, int, cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&::cublasCreate) create;
  decltype(&::cublasSetStream) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasSetWorkspace) set_workspace;
  GemmEx gemm_ex;
  GemmStridedBatchedEx gemm_strided_batched_ex;
  decltype(&::cublasGetStatusString) status_string;
  decltype(&::cublasGetStatusName) status_name;
};
const Cublas& cublas();

// The same for NVRTC (the fused kernels' compiler: jit.cpp).
struct Nvrtc {
  decltype(&::nvrtcVersion) version;
  decltype(&::nvrtcCreateProgram) create_program;
  decltype(&::nvrtcCompileProgram) compile_program;
  decltype(&::nvrtcDestroyProgram) destroy_program;
  decltype(&::nvrtcGetProgramLogSize) program_log_size;
  decltype(&::nvrtcGetProgramLog) program_log;
  decltype(&::nvrtcGetCUBINSize) cubin_size;
  decltype(&::nvrtcGetCUBIN) cubin;
  decltype(&::nvrtcGetErrorString) error_string;
};
const Nvrtc& nvrtc();

}  // namespace kiln::backend::cuda
