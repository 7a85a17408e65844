#pragma once
// For tests that run a backend's executor on a compiled program directly:
// the program of some traced tensors, and poisoned host memory for its
// outputs and arena.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "kiln/compiler/compile.h"
#include "kiln/kiln.h"

namespace kiln::testing {

// 64-byte-aligned blocks filled with 0xA5: every element must be written.
struct HostMemory {
  std::vector<std::unique_ptr<char, decltype(&std::free)>> blocks;
  char* get(size_t n) {
    const size_t size = (std::max<size_t>(n, 1) + 63) / 64 * 64;
    blocks.emplace_back(static_cast<char*>(std::aligned_alloc(64, size)), &std::free);
    std::memset(blocks.back().get(), 0xA5, size);
    return blocks.back().get();
  }
};

// The program computing `results` (its outputs are their nodes, in order)
// and its parameters' buffers, ready to read.
struct TracedProgram {
  compiler::Program program;
  std::vector<ir::NodePtr> outputs;
  std::vector<void*> params;
};
inline TracedProgram trace_program(const std::vector<Tensor>& results, const compiler::CompileOptions& options = {}) {
  TracedProgram t;
  std::vector<ir::NodePtr> params;
  for (const auto& r : results) t.outputs.push_back(r.node());
  t.program = compiler::compile(ir::flatten(t.outputs, &params), options);
  for (const auto& n : params) {
    n->data->wait();
    t.params.push_back(n->data->storage->data());
  }
  return t;
}

}  // namespace kiln::testing
