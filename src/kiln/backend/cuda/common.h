#pragma once
// Host-side internals of the CUDA backend (backend/cuda/*.cpp only): error
// checking, the per-device state (streams, cuBLAS handle, allocator).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "kiln/backend/cuda/pool.h"
#include "kiln/core/device.h"

namespace kiln::backend::cuda {

// Throws kiln::Error "cuda: <call> failed: <cudaGetErrorString> (<name>)".
void check(cudaError_t status, const char* call);
void check(cublasStatus_t status, const char* call);
#define KILN_CUDA_CHECK(call) ::kiln::backend::cuda::check((call), #call)

// Makes `device` current on this thread for the guard's lifetime.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// One per visible device, created on first use and never destroyed (memory
// may be released during static destruction, after any destructor order).
struct DeviceState {
  explicit DeviceState(int index);
  int index;
  cudaStream_t stream = nullptr;       // the steps' kernels
  cudaStream_t copy_stream = nullptr;  // host<->device copies outside steps
  cublasHandle_t blas = nullptr;       // bound to `stream`
  bool blas_tf32 = false;              // the handle's math mode (set by the step's thread)
  BlockPool pool;
  cudaDeviceProp props{};
};
// Throws (check_device) unless `index` is a visible device.
DeviceState& device_state(int index);

}  // namespace kiln::backend::cuda
