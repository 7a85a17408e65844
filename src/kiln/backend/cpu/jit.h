#pragma once
// Fused elementwise programs compiled to AVX2 machine code (xbyak), the way
// XLA's CPU backend emits one loop per fusion. The interpreter (fused.cpp)
// runs a program op by op over chunks of 512 values, so every step loads and
// stores its operands from L1; the compiled loop keeps a step's 8 values in a
// ymm register from the load of its inputs to the store of its outputs.
// Values are bit-identical to the interpreter's (a NaN may differ in sign or
// payload: x86 keeps the first operand's NaN, and a compiler may swap the
// operands of a + b): the same IEEE operations in the same order (no
// contraction into FMAs); transcendental steps (exp, log,
// tanh, erf, sigmoid, GELU and its gradient) call the interpreter's own
// 8-lane functions (vecmath.h), or with AVX-512 their 16-lane forms, which
// give the same bits lane for lane (jit_wide_enabled).
//
// bf16 operands are widened on load (exact) and rounded to nearest even on
// store, and steps of bf16 dtype round their value, as the interpreter does.
//
// Programs the code generator does not take stay with the interpreter:
// random numbers, double-evaluated integer programs, and
// operands that are neither contiguous nor one broadcast value nor
// contiguous along rows of the last axis of 64 values or more (those run a
// call per row, with the row's pointers: the same code).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kiln/compiler/program.h"

namespace kiln::backend::cpu {

class JitKernel;

// The compiled loop of a fused instruction, or nullptr (interpreted). Equal
// programs share one kernel. Off when KILN_JIT=0, or without AVX2 at run time.
std::shared_ptr<const JitKernel> jit_compile(const compiler::Instr& ins);
// Runs it: the same contract as run_fused.
void run_jit(const JitKernel& kernel, const compiler::Instr& ins, std::span<char* const> inputs, char* output,
             std::span<char* const> extra);
// Whether jit_compile compiles anything (tests compare both paths).
bool jit_enabled();
void set_jit_enabled(bool on);
// Whether loops with transcendental steps take 16 values an iteration (two
// ymm halves a value, one 16-lane call for both): where the build and the
// CPU have AVX-512, unless KILN_JIT_WIDE=0. The values are the same bits.
bool jit_wide_enabled();
// The values a compiled loop takes an iteration: 8 or 16.
int64_t jit_values_an_iteration(const JitKernel& kernel);

// A program bound to the CPU backend: its instructions' compiled loops.
struct Plan {
  std::vector<std::shared_ptr<const JitKernel>> kernels;  // per instruction; null: not compiled
  int32_t compiled() const {
    return static_cast<int32_t>(std::count_if(kernels.begin(), kernels.end(), [](const auto& k) { return k != nullptr; }));
  }
};
std::shared_ptr<Plan> prepare(const compiler::Program& program);

}  // namespace kiln::backend::cpu
