#pragma once
// The CUDA backend's interface to the rest of kiln (built when
// KILN_HAVE_CUDA is defined; see cmake/cuda.cmake). No CUDA headers here:
// the runtime and the tests include this from plain C++.
//
// Execution model: one CUDA stream per device. A compiled step's kernels are
// queued on it by the device's Stream worker thread, which then waits for
// the stream, so a Buffer's event is signalled only once its values are in
// device memory. Device memory comes from a caching allocator (pool.h);
// memory goes back to it only when no queued kernel can still use it.
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "kiln/compiler/program.h"
#include "kiln/core/device.h"

namespace kiln::backend::cuda {

// Visible CUDA devices: 0 without a driver or a device (never throws, never
// aborts). The first call initialises the CUDA runtime.
int device_count();
// Why device_count() is 0 ("cudaGetDeviceCount: no CUDA-capable device is
// detected"), or "" when devices are visible.
std::string no_device_reason();
// Throws kiln::Error unless `device` is a visible CUDA device: "device cuda:1
// requested but 0 CUDA devices are visible (...)".
void check_device(Device device);
// "NVIDIA H200, compute capability 9.0, 132 multiprocessors, 139.8 GiB".
std::string device_description(Device device);

// Registers the CUDA memory hooks with core's Storage (idempotent). The
// runtime calls it before touching a CUDA device.
void register_memory();

// Allocator statistics of one device, in bytes.
struct MemoryStats {
  size_t in_use = 0;     // handed out
  size_t cached = 0;     // held in free lists
  size_t reserved = 0;   // obtained from cudaMalloc, in use or cached
  size_t peak_in_use = 0;
};
MemoryStats memory_stats(Device device);

// TF32 tensor-core math for the f32 matrix products of the steps run from
// now on (cuBLAS's CUBLAS_TF32_TENSOR_OP_MATH; kiln::set_allow_tf32).
void set_allow_tf32(bool on);

// Whether the CUDA backend has a kernel for a (not fused) instruction of
// this op: an entry in its kernel table (kernels.h). Needs no device.
bool has_kernel(ir::Op op);

// The fused programs' generated kernels so far (jit.h): "12 kernels in 2
// modules: 1 compiled in 0.84 s, 1 from the disk cache (~/.cache/kiln/cuda)".
std::string generated_kernels_summary();

// A Program bound to a device: its instruction descriptors (fused programs,
// views) uploaded once, its scratch memory and the step's slot table.
struct Plan;
std::shared_ptr<Plan> prepare(const compiler::Program& program, Device device);
// Runs one step: queues every instruction on the device's stream and waits
// for them. params/outputs/arena are device pointers (Storage::data()).
// Throws kiln::Error for bad data (an id out of range), naming the op, and
// for CUDA errors, naming the call.
void execute(Plan& plan, std::span<void* const> params, std::span<void* const> outputs, void* arena);

}  // namespace kiln::backend::cuda
