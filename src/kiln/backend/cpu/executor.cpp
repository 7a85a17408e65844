#include "kiln/backend/cpu/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/dist/collectives.h"

namespace kiln::backend::cpu {

using compiler::SlotKind;

namespace {

// KILN_PROFILE=1: time every instruction, grouped by kernel, and print the
// table (the 40 costliest rows; KILN_PROFILE=all: every row) when the process
// exits.
bool full_profile() {
  const char* v = std::getenv("KILN_PROFILE");
  return v && std::string(v) == "all";
}

struct Profile {
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::mutex mu;
  std::map<std::string, Entry> entries;
  ~Profile() {
    if (entries.empty()) return;
    std::vector<std::pair<std::string, Entry>> rows(entries.begin(), entries.end());
    std::sort(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (auto& r : rows) total += r.second.seconds;
    std::fprintf(stderr, "kiln profile (KILN_PROFILE=1): %.3f s in kernels\n", total);
    std::fprintf(stderr, "  %9s %6s %9s  %s\n", "seconds", "%", "calls", "kernel");
    for (size_t i = 0; i < rows.size() && (i < 40 || full_profile()); ++i)
      std::fprintf(stderr, "  %9.3f %5.1f%% %9lld  %s\n", rows[i].second.seconds, 100 * rows[i].second.seconds / total,
                   static_cast<long long>(rows[i].second.calls), rows[i].first.c_str());
  }
};

bool profiling() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_PROFILE");
    return v && *v && std::string(v) != "0";
  }();
  return on;
}

Profile& profile() {
  static Profile p;
  return p;
}

std::string label(const compiler::Instr& ins) {
  std::string s;
  if (ins.fused) {
    s = "fused[";
    for (size_t k = 0; k < ins.program.size(); ++k) s += (k ? " " : "") + std::string(ir::op_name(ins.program[k].op));
    s += "]";
  } else {
    s = ir::op_name(ins.op);
  }
  if (!ins.extra_outputs.empty()) s += " +" + std::to_string(ins.extra_outputs.size()) + " outputs";
  return s + " " + to_string(ins.output.view.shape);
}

}  // namespace

void execute(const compiler::Program& program, std::span<void* const> params,
             std::span<void* const> outputs, void* arena) {
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
  for (const auto& ins : program.instrs) {
    in.clear();
    extra.clear();
    for (const auto& e : ins.extra_outputs) extra.push_back(base[e.out.slot]);
    for (const auto& op : ins.inputs) {
      if (!pending.empty()) await_slot(op.slot);
      in.push_back(base[op.slot]);
    }
    char* out = base[ins.output.slot];
    auto t0 = profiling() ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    if (ins.fused) run_fused(ins, in, out, extra);
    else if (ins.op == ir::Op::AllReduce || ins.op == ir::Op::BroadcastFrom)
      pending.emplace_back(ins.output.slot, start_collective(ins, in, out));
    else run_kernel(ins, in, out);
    if (!pending.empty() && pending.back().first != ins.output.slot) ++overlapped;
    if (profiling()) {
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(profile().mu);
      auto& e = profile().entries[label(ins)];
      e.seconds += dt;
      ++e.calls;
    }
  }
  while (!pending.empty()) await_slot(pending.front().first);
  if (overlapped) dist::record_overlap(overlapped);
}

}  // namespace kiln::backend::cpu
