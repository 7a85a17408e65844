#pragma once
// For the CPU executor's tests: run a compiled program on the CPU executor,
// with its compiled loops or its interpreter, into poisoned host memory, and
// return each output's bytes.
#include <vector>

#include "kiln/backend/cpu/executor.h"
#include "kiln/backend/cpu/jit.h"
#include "support/program_util.h"

namespace kiln::testing {

inline std::vector<std::vector<char>> run_on_cpu(const compiler::Program& p, const std::vector<void*>& params,
                                                 bool jit) {
  HostMemory mem;
  std::vector<void*> outs;
  for (size_t n : p.output_nbytes) outs.push_back(mem.get(n));
  const bool was = backend::cpu::jit_enabled();
  backend::cpu::set_jit_enabled(jit);
  auto plan = backend::cpu::prepare(p);
  backend::cpu::set_jit_enabled(was);
  backend::cpu::execute(p, plan.get(), params, outs, mem.get(p.arena_bytes));
  std::vector<std::vector<char>> bytes;
  for (size_t o = 0; o < outs.size(); ++o) {
    const char* b = static_cast<const char*>(outs[o]);
    bytes.emplace_back(b, b + p.output_nbytes[o]);
  }
  return bytes;
}

}  // namespace kiln::testing
