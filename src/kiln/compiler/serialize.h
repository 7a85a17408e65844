#pragma once
// Compiled programs as bytes, for the on-disk compile cache
// (runtime/program_cache.h). The record holds the graph it was compiled
// from, so a hash collision or a file of another graph is a miss, never a
// wrong program, and the compiler's fingerprint (a digest of the compiler's
// and the IR's sources, made at build time), so a rebuilt compiler ignores
// the old records.
#include <optional>
#include <string>

#include "kiln/compiler/program.h"
#include "kiln/ir/graph.h"

namespace kiln::compiler {

// Digest of the sources that decide what compile() produces.
const char* compiler_fingerprint();

std::string serialize_program(const ir::Graph& graph, const Program& program);

// The program of `bytes` when they were written for `graph` by this
// compiler; nullopt for another graph or compiler. Malformed or truncated
// bytes: kiln::Error saying what is wrong.
std::optional<Program> deserialize_program(const std::string& bytes, const ir::Graph& graph);

}  // namespace kiln::compiler
