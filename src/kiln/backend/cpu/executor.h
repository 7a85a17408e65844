#pragma once
// Runs a compiled Program on the host: binds each instruction to its kernel
// (the fused elementwise interpreter or a kernel in kernels.cpp). Kernels
// throw kiln::Error for data-dependent failures (an id out of range); the
// caller marks the step failed.
#include <future>
#include <span>
#include <vector>

#include "kiln/compiler/program.h"

namespace kiln::backend::cpu {

struct Plan;
// `plan`: the program's compiled loops (jit.h); null runs every fused
// instruction in the interpreter.
void execute(const compiler::Program& program, const Plan* plan, std::span<void* const> params,
             std::span<void* const> outputs, void* arena);

// Kernel entry points used by execute().
// `extra`: the base of each of ins.extra_outputs' slots.
void run_fused(const compiler::Instr& ins, std::span<char* const> inputs, char* output,
               std::span<char* const> extra = {});
// Elements [start, start + len) of a fused f32 program, on this thread (the
// compiled loops' ragged ends).
void run_fused_range(const compiler::Instr& ins, std::span<char* const> inputs, char* output,
                     std::span<char* const> extra, int64_t start, int64_t len);
// The values of a fused f32 program's last step for elements [start, start +
// len), len <= 512, into `values` (a compiled reduction's ragged end).
void run_fused_values(const compiler::Instr& ins, std::span<char* const> inputs, int64_t start, int64_t len,
                      float* values);
void run_kernel(const compiler::Instr& ins, std::span<char* const> inputs, char* output);
// Sums of long rows (the Sum kernel's and fused reductions') go in blocks of
// this many values, each in double, then the blocks in order: the same
// result on any number of threads.
constexpr int64_t kSumBlock = 8192;
// A fused reduction's block is summed in this many double lanes (value i of
// the block into lane i % kSumLanes, each lane in order), then the lanes in
// order: one order for the interpreter and the compiled loops (jit.h).
constexpr int64_t kSumLanes = 8;
inline double sum_lanes(const double* lanes) {
  double s = 0;
  for (int64_t l = 0; l < kSumLanes; ++l) s += lanes[l];
  return s;
}
// A Sum that carries an elementwise program (fused.cpp).
void run_fused_sum(const compiler::Instr& ins, std::span<char* const> inputs, char* output);
// The slot of a GEMM or attention operand as f32: `base` as stored (f32), or
// (bf16) the elements the view spans widened into `wide`, at the same offsets.
const float* as_f32_operand(const compiler::Operand& op, const char* base, std::vector<float>& wide);
// Attention (grad = false) / AttentionGrad (attention.cpp).
void attention_kernel(const compiler::Instr& ins, std::span<char* const> inputs, char* output, bool grad);
// Collectives (AllReduce, BroadcastFrom): copies the inputs into the output
// and starts the collective on the replica's collective thread; the output is
// ready when the future is.
std::shared_future<void> start_collective(const compiler::Instr& ins, std::span<char* const> inputs, char* output);

}  // namespace kiln::backend::cpu
