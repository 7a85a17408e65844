#include "kiln/backend/cpu/executor.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "kiln/backend/cpu/jit.h"
#include "kiln/compiler/profile.h"
#include "kiln/core/error.h"
#include "kiln/dist/collectives.h"

namespace kiln::backend::cpu {

using compiler::SlotKind;

void execute(const compiler::Program& program, const Plan* plan, std::span<void* const> params,
             std::span<void* const> outputs, void* arena) {
  KILN_ASSERT(!plan || plan->kernels.size() == program.instrs.size());
  std::vector<char*> base(program.slots.size());
  for (size_t s = 0; s < program.slots.size(); ++s) {
    const auto& slot = program.slots[s];
    switch (slot.kind) {
      case SlotKind::Param: base[s] = static_cast<char*>(params[slot.index]); break;
      case SlotKind::Output: base[s] = static_cast<char*>(outputs[slot.index]); break;
      case SlotKind::Temp: base[s] = static_cast<char*>(arena) + slot.offset; break;
    }
  }
  // Collectives in flight: their output slot and completion. An instruction
  // that reads such a slot waits for it first, so a bucket's all-reduce runs
  // while the rest of the backward pass computes. Whatever happens, nothing
  // leaves while a collective may still write into the arena.
  std::vector<std::pair<int32_t, std::shared_future<void>>> pending;
  struct Drain {
    std::vector<std::pair<int32_t, std::shared_future<void>>>& pending;
    ~Drain() {
      for (auto& p : pending) p.second.wait();
    }
  } drain{pending};
  auto await_slot = [&](int32_t slot) {
    for (size_t k = 0; k < pending.size(); ++k)
      if (pending[k].first == slot) {
        auto done = pending[k].second;
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
        done.get();  // rethrows the collective's error
        return;
      }
  };
  int64_t overlapped = 0;
  std::vector<char*> in, extra;
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    const auto& ins = program.instrs[i];
    in.clear();
    extra.clear();
    for (const auto& e : ins.extra_outputs) extra.push_back(base[e.out.slot]);
    for (const auto& op : ins.inputs) {
      if (!pending.empty()) await_slot(op.slot);
      in.push_back(base[op.slot]);
    }
    char* out = base[ins.output.slot];
    const bool timed = compiler::profiling();
    auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const JitKernel* compiled = plan ? plan->kernels[i].get() : nullptr;
    if (compiled) run_jit(*compiled, ins, in, out, extra);
    else if (ins.fused) run_fused(ins, in, out, extra);
    else if (ins.op == ir::Op::AllReduce || ins.op == ir::Op::BroadcastFrom)
      pending.emplace_back(ins.output.slot, start_collective(ins, in, out));
    else run_kernel(ins, in, out);
    if (!pending.empty() && pending.back().first != ins.output.slot) ++overlapped;
    if (timed)  // which fused programs the JIT did not take
      compiler::profile_add(ins, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                            ins.fused && !compiled ? "interpreted" : nullptr);
  }
  while (!pending.empty()) await_slot(pending.front().first);
  if (overlapped) dist::record_overlap(overlapped);
}

}  // namespace kiln::backend::cpu
