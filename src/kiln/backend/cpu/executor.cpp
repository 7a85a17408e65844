#include "kiln/backend/cpu/executor.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "kiln/backend/cpu/jit.h"
#include "kiln/compiler/profile.h"
#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"

namespace kiln::backend::cpu {

using compiler::SlotKind;

namespace {

// Two products of a pair (compiler::Instr::with_next) side by side, one per
// thread of the two: inside the parallel region each product's sgemm runs
// single-threaded. `await` waits for a collective writing a slot. The first
// error wins.
template <typename Await>
void run_pair(const compiler::Instr& first, const compiler::Instr& second, const std::vector<char*>& base,
              const std::vector<char*>& first_in, Await await) {
  std::vector<char*> second_in;
  for (const auto& op : second.inputs) {
    await(op.slot);
    second_in.push_back(base[op.slot]);
  }
  const compiler::Instr* pair[2] = {&first, &second};
  const std::vector<char*>* inputs[2] = {&first_in, &second_in};
  std::exception_ptr error[2];
  double seconds[2] = {0, 0};
  const auto start = std::chrono::steady_clock::now();
  // (A team of one, should the runtime grant no more, runs both in turn.)
#pragma omp parallel num_threads(2)
  for (int t = omp_get_thread_num(); t < 2; t += omp_get_num_threads()) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      run_kernel(*pair[t], *inputs[t], base[pair[t]->output.slot]);
    } catch (...) {
      error[t] = std::current_exception();
    }
    seconds[t] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (auto& e : error)
    if (e) std::rethrow_exception(e);
  if (compiler::profiling()) {  // the pair's time, shared in proportion to each product's own
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double both = std::max(seconds[0] + seconds[1], 1e-12);
    for (int t = 0; t < 2; ++t) compiler::profile_add(*pair[t], wall * seconds[t] / both, "paired");
  }
}

}  // namespace

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
    if (ins.with_next && i + 1 < program.instrs.size() && omp_get_max_threads() == 2) {
      run_pair(program.instrs[i], program.instrs[i + 1], base, in, [&](int32_t slot) {
        if (!pending.empty()) await_slot(slot);
      });
      ++i;
      continue;
    }
    const bool timed = compiler::profiling();
    auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    const JitKernel* compiled = plan ? plan->kernels[i].get() : nullptr;
    if (compiled) run_jit(*compiled, ins, in, out, extra);
    else if (ins.fused) run_fused(ins, in, out, extra);
    else if (ins.op == ir::Op::AllReduce || ins.op == ir::Op::BroadcastFrom)
      pending.emplace_back(ins.output.slot, start_collective(ins, in, out));
    else run_kernel(ins, in, out, extra);
    if (!pending.empty() && pending.back().first != ins.output.slot) ++overlapped;
    if (timed)  // which fused programs the JIT did not take
      compiler::profile_add(ins, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                            ins.fused && !compiled && !own_loop(ins) ? "interpreted" : nullptr);
  }
  while (!pending.empty()) await_slot(pending.front().first);
  if (overlapped) dist::record_overlap(overlapped);
}

}  // namespace kiln::backend::cpu
