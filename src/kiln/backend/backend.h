#pragma once
// The interface the runtime runs compiled programs through: one
// implementation per device kind (backend/cpu/cpu_backend.cpp,
// backend/cuda/cuda_backend.cpp). The build lists the backends it compiled
// (the generated backends.cpp of src/kiln/CMakeLists.txt), so the runtime
// names none of them and has no #ifdef for any.
#include <memory>
#include <span>

#include "kiln/compiler/compile.h"
#include "kiln/core/device.h"

namespace kiln::backend {

// A program prepared for a device: the CPU's compiled loops, the CUDA
// descriptors uploaded once. Each backend derives its own.
struct Plan {
  virtual ~Plan() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  // What the compiler may do for this backend's executors (compile.h).
  virtual compiler::CompileOptions compile_options() const = 0;
  // Before a device is first used: throws kiln::Error naming the device when
  // it does not exist, and sets up its memory.
  virtual void open(Device device) = 0;
  virtual std::unique_ptr<Plan> prepare(const compiler::Program& program, Device device) = 0;
  // Runs one step to completion. params/outputs/arena are the device's
  // memory (Storage::data()). Throws kiln::Error for bad data, naming the op.
  virtual void execute(const compiler::Program& program, Plan& plan, Device device, std::span<void* const> params,
                       std::span<void* const> outputs, void* arena) = 0;
  // TF32 tensor-core math for f32 products from now on; backends without
  // tensor cores ignore it.
  virtual void set_allow_tf32(bool on) {}
};

// The backends of this build (generated: backends.cpp).
std::span<Backend* const> built_backends();
// The backend of a device kind; nullptr when this build has none.
inline Backend* find_backend(DeviceKind kind) {
  for (Backend* b : built_backends())
    if (b->kind() == kind) return b;
  return nullptr;
}

}  // namespace kiln::backend
