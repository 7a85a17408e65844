#pragma once
// CUDA C++ for the compiler's fused elementwise programs: one kernel per
// program, straight-line code over named values (no register limit, no
// interpretation), view index math with the shapes as literals (division by
// constants), the same formulas as the device interpreter (fused_math.h) and
// so as the CPU. NVRTC compiles the kernels of a plan as one translation unit
// (jit.h). Host code only: the tests compile the generated code here.
#include <string>
#include <vector>

#include "kiln/compiler/program.h"

namespace kiln::backend::cuda {

constexpr int kGeneratedThreads = 256;  // threads per block of every generated kernel

// The kernel's text with `name` as its name. It takes one pointer per input
// operand, then one per output (the main output, then extra_outputs), each
// already advanced to the operand's view offset, and loops over the output's
// elements. Identical programs over identically shaped views give identical
// text (so one compiled kernel serves every layer). Throws kiln::Error for
// an op the generator does not know.
std::string fused_kernel_source(const compiler::Instr& ins, const std::string& name);

// A whole translation unit: the shared headers' includes, then the kernels.
std::string fused_translation_unit(const std::vector<std::string>& kernels);

}  // namespace kiln::backend::cuda
