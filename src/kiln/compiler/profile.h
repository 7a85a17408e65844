// KILN_PROFILE=1: the backends' executors time every instruction (the CPU
// with a clock around each call, CUDA with events around each launch) and
// add it here under the instruction's label; the table of the 40 costliest
// labels (KILN_PROFILE=all: every one) goes to stderr when the process exits.
#pragma once

#include <string>

#include "kiln/compiler/program.h"

namespace kiln::compiler {

// True when KILN_PROFILE is set and not "0" (read once).
bool profiling();

// "fused[add mul ...] +N outputs [shape]" or the op's name and output shape.
std::string instr_label(const Instr& ins);

// Adds one timed run of `ins` to the table (thread-safe); a note, such as
// "interpreted", makes a separate row.
void profile_add(const Instr& ins, double seconds, const char* note = nullptr);

// Empties the table: `kiln bench` calls it after its warm-up steps, so the
// table covers the measured steps only (no first-touch page faults, no
// parameter initialisation).
void profile_reset();

// What the table holds so far, in three parts: matrix products (with their
// floating-point operations, 2·M·N·K each), the fused attention and its
// gradient, and every other kernel. `kiln bench` prints them per step.
struct ProfileTotals {
  double product_seconds = 0, product_flops = 0, attention_seconds = 0, other_seconds = 0;
};
ProfileTotals profile_totals();

}  // namespace kiln::compiler
