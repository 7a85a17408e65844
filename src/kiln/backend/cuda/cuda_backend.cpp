// The CUDA backend behind the runtime's interface (backend/backend.h).
#include "kiln/backend/backend.h"
#include "kiln/backend/cuda/cuda.h"

namespace kiln::backend::cuda {
namespace {

struct CudaPlan : backend::Plan {
  std::shared_ptr<cuda::Plan> bound;  // the program bound to its device
};

class CudaBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CUDA; }

  // None of the options: the CUDA kernels read contiguous operands, write
  // contiguous heads, recompute attention probabilities and run the loss and
  // its gradient apart (compile.h says what each would need).
  compiler::CompileOptions compile_options() const override { return {}; }

  void open(Device device) override {
    check_device(device);  // "device cuda:1 requested but 0 CUDA devices are visible"
    register_memory();
  }

  std::unique_ptr<backend::Plan> prepare(const compiler::Program& program, Device device) override {
    auto plan = std::make_unique<CudaPlan>();
    plan->bound = cuda::prepare(program, device);
    return plan;
  }

  void execute(const compiler::Program&, backend::Plan& plan, Device, std::span<void* const> params,
               std::span<void* const> outputs, void* arena) override {
    cuda::execute(*static_cast<CudaPlan&>(plan).bound, params, outputs, arena);  // returns once the device is done
  }

  void set_allow_tf32(bool on) override { cuda::set_allow_tf32(on); }
};

}  // namespace

Backend& backend() {
  static CudaBackend b;
  return b;
}

}  // namespace kiln::backend::cuda
