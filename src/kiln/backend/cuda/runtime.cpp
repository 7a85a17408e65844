// Devices, errors, memory: the CUDA backend's host runtime.
#include <cuda_runtime_api.h>

#include <array>
#include <cstdio>
#include <memory>

#include "kiln/backend/cuda/common.h"
#include "kiln/backend/cuda/cuda.h"
#include "kiln/backend/cuda/libraries.h"
#include "kiln/core/buffer.h"
#include "kiln/core/error.h"

namespace kiln::backend::cuda {

void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a non-sticky error
  throw Error(detail::concat("cuda: ", call, " failed: ", cudaGetErrorString(status), " (", cudaGetErrorName(status),
                             ")"));
}

void check(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error(detail::concat("cuda: ", call, " failed: ", cublas().status_string(status), " (",
                             cublas().status_name(status), ")"));
}

DeviceGuard::DeviceGuard(int device) {
  KILN_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) KILN_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
}

namespace {

struct Enumeration {
  int count = 0;
  std::string reason;
};

// Leaked, like the device states: storages released during static
// destruction (the runtime's compile cache) still look devices up.
const Enumeration& enumeration() {
  static const Enumeration& e = *[] {
    auto* r_ptr = new Enumeration;
    Enumeration& r = *r_ptr;
    int n = 0;
    cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      cudaGetLastError();
      r.reason = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
      n = 0;
    } else if (n == 0) {
      r.reason = "cudaGetDeviceCount found none";
    }
    r.count = n;
    return r_ptr;
  }();
  return e;
}

void* device_malloc(int device, size_t nbytes) {
  DeviceGuard guard(device);
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, nbytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;
  }
  check(status, "cudaMalloc");
  return p;
}

}  // namespace

DeviceState::DeviceState(int i)
    : index(i),
      pool("cuda:" + std::to_string(i), [i](size_t n) { return device_malloc(i, n); },
           [i](void* p) {
             // During static destruction the runtime may be gone: nothing to free then.
             int previous = -1;
             cudaGetDevice(&previous);
             if (cudaSetDevice(i) == cudaSuccess) cudaFree(p);
             cudaSetDevice(previous);
             cudaGetLastError();
           }) {
  DeviceGuard guard(i);
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&props, i));
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  KILN_CUDA_CHECK(cublas().create(&blas));
  KILN_CUDA_CHECK(cublas().set_stream(blas, stream));
  // Plain fp32 products (no TF32): the CPU backend's precision.
  KILN_CUDA_CHECK(cublas().set_math_mode(blas, CUBLAS_DEFAULT_MATH));
  // cuBLAS's own workspace, the size its documentation recommends (32 MiB on
  // Hopper, 4 MiB before): without one, a product whose kernel needs more
  // than the default may allocate and free memory per call, and cudaFree
  // waits for the whole device. Kept for the process (as the state is).
  const size_t workspace = props.major >= 9 ? (size_t{32} << 20) : (size_t{4} << 20);
  void* ws = nullptr;
  if (cudaMalloc(&ws, workspace) == cudaSuccess && cublas().set_workspace(blas, ws, workspace) == CUBLAS_STATUS_SUCCESS)
    return;
  std::fprintf(stderr, "kiln: cuda:%d: no %zu MiB cuBLAS workspace, using cuBLAS's default\n", i, workspace >> 20);
  if (ws) cudaFree(ws);
  cudaGetLastError();
}

int device_count() { return enumeration().count; }

std::string no_device_reason() { return enumeration().reason; }

void check_device(Device device) {
  KILN_CHECK(device.kind == DeviceKind::CUDA, "internal error: ", device.str(), " is not a CUDA device");
  const Enumeration& e = enumeration();
  if (device.index < e.count) return;
  throw Error(detail::concat("device ", device.str(), " requested but ", e.count, " CUDA device",
                             e.count == 1 ? " is" : "s are", " visible",
                             e.reason.empty() ? std::string() : " (" + e.reason + ")"));
}

DeviceState& device_state(int index) {
  check_device(Device::cuda(index));
  static std::mutex& mu = *new std::mutex;        // leaked on purpose (see common.h)
  static std::array<DeviceState*, 64> states{};  // trivially destructible
  KILN_CHECK(index < static_cast<int>(states.size()), "cuda: device index ", index, " beyond 64");
  std::lock_guard<std::mutex> lock(mu);
  if (!states[index]) states[index] = new DeviceState(index);
  return *states[index];
}

std::string device_description(Device device) {
  const cudaDeviceProp& p = device_state(device.index).props;
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f", static_cast<double>(p.totalGlobalMem) / (1u << 30));
  return detail::concat(p.name, ", compute capability ", p.major, ".", p.minor, ", ", p.multiProcessorCount,
                        " multiprocessors, ", gib, " GiB");
}

namespace {

void* hook_allocate(Device device, size_t nbytes) { return device_state(device.index).pool.allocate(nbytes); }

void hook_release(Device device, void* ptr, size_t nbytes) noexcept {
  try {
    device_state(device.index).pool.release(ptr, nbytes);
  } catch (...) {
    // Only a device that was never visible gets here, and it never allocated.
  }
}

void copy(Device device, void* dst, const void* src, size_t nbytes, cudaMemcpyKind kind) {
  DeviceState& s = device_state(device.index);
  DeviceGuard guard(device.index);
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, s.copy_stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(s.copy_stream));
}

void hook_to_device(Device device, void* dst, const void* src, size_t nbytes) {
  copy(device, dst, src, nbytes, cudaMemcpyHostToDevice);
}

void hook_to_host(Device device, void* dst, const void* src, size_t nbytes) {
  copy(device, dst, src, nbytes, cudaMemcpyDeviceToHost);
}

const DeviceMemoryHooks kHooks{hook_allocate, hook_release, hook_to_device, hook_to_host};

// Registered at start-up: a Storage may be made (safetensors, from_data)
// before any DeviceContext. This file is always linked: the runtime calls
// device_count()/check_device().
[[maybe_unused]] const bool kRegistered = [] {
  register_device_memory(DeviceKind::CUDA, &kHooks);
  return true;
}();

}  // namespace

void register_memory() { register_device_memory(DeviceKind::CUDA, &kHooks); }

MemoryStats memory_stats(Device device) {
  BlockPool::Stats s = device_state(device.index).pool.stats();
  return MemoryStats{s.in_use, s.cached, s.reserved, s.peak_in_use};
}

}  // namespace kiln::backend::cuda
