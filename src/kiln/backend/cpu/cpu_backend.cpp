// The CPU backend behind the runtime's interface (backend/backend.h).
#include <omp.h>

#include "kiln/backend/backend.h"
#include "kiln/backend/cpu/bf16_tiles.h"
#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/jit.h"
#include "kiln/distributed/threads.h"

namespace kiln::backend::cpu {
namespace {

struct CpuPlan : backend::Plan {
  std::shared_ptr<cpu::Plan> loops;  // the fused instructions' compiled loops (jit.h)
};

class CpuBackend final : public Backend {
 public:
  DeviceKind kind() const override { return DeviceKind::CPU; }

  // Every option: the CPU kernels were written and checked for each.
  compiler::CompileOptions compile_options() const override {
    return {.fuse_sum_inputs = true,
            .strided_attention_operands = true,
            .strided_row_sums = true,
            .concurrent_products = true,
            .in_place = true,
            .loss_with_gradient = true,
            .token_major_attention = true,
            .attention_probabilities = true,
            .bf16_results = true};
  }

  // The CPU's choices of products (KILN_CPU_BF16, KILN_CPU_AMX) are settled
  // here, in the caller's thread: a malformed value is an error before any
  // step, never an exception inside a kernel's parallel region.
  void open(Device) override {
    if (native_bf16_products()) amx_tiles();
  }

  std::unique_ptr<backend::Plan> prepare(const compiler::Program& program, Device) override {
    auto plan = std::make_unique<CpuPlan>();
    plan->loops = cpu::prepare(program);
    return plan;
  }

  void execute(const compiler::Program& program, backend::Plan& plan, Device device, std::span<void* const> params,
               std::span<void* const> outputs, void* arena) override {
    // A replica's kernels use its share of the cores.
    const int threads = dist::threads_for(device);
    if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
    cpu::execute(program, static_cast<CpuPlan&>(plan).loops.get(), params, outputs, arena);
  }
};

}  // namespace

Backend& backend() {
  static CpuBackend b;
  return b;
}

}  // namespace kiln::backend::cpu
