#pragma once
// The on-disk compile cache (PyTorch/XLA's persistent cache): a compiled step
// program is saved under cache_dir("programs") as
// <graph hash>-<options hash>.kprog (CompileOptions::hash: each backend
// compiles with its own options), and a later process that traces the same graph loads it instead of compiling.
// Records hold their graph and the compiler's fingerprint
// (compiler/serialize.h), so another graph or another build is a miss; a
// damaged record is a warning and a recompile, never a wrong program.
// Programs that compile in less than KILN_CACHE_MIN_COMPILE_MS milliseconds
// (default 5) are not saved: writing and reading them would cost more than
// compiling. At most kMaxRecords records are kept (the oldest go first).
#include <optional>

#include "kiln/compiler/compile.h"
#include "kiln/compiler/program.h"
#include "kiln/ir/graph.h"

namespace kiln::runtime {

constexpr int kMaxRecords = 256;

std::optional<compiler::Program> load_cached_program(const ir::Graph& graph, const compiler::CompileOptions& options);
void save_cached_program(const ir::Graph& graph, const compiler::CompileOptions& options,
                         const compiler::Program& program, double compile_seconds);

}  // namespace kiln::runtime
