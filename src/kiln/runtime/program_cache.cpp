#include "kiln/runtime/program_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kiln/compiler/serialize.h"
#include "kiln/core/env.h"
#include "kiln/core/error.h"
#include "kiln/core/atomic_file.h"
#include "kiln/core/cache_dir.h"

namespace kiln::runtime {
namespace {

namespace fs = std::filesystem;

// The same graph compiles to another program under other options.
fs::path record_path(const ir::Graph& graph, const compiler::CompileOptions& options) {
  const fs::path dir = cache_dir("programs");
  if (dir.empty()) return {};
  char name[48];
  std::snprintf(name, sizeof name, "%016llx-%016llx.kprog", static_cast<unsigned long long>(graph.hash()),
                static_cast<unsigned long long>(options.hash()));
  return dir / name;
}

double min_compile_seconds() {
  return env_number("KILN_CACHE_MIN_COMPILE_MS", 0) / 1000;
}

// Removes the oldest records beyond kMaxRecords.
void prune(const fs::path& dir) {
  std::vector<std::pair<fs::file_time_type, fs::path>> records;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kprog") records.emplace_back(e.last_write_time(), e.path());
  if (records.size() <= static_cast<size_t>(kMaxRecords)) return;
  std::sort(records.begin(), records.end());
  for (size_t i = 0; i + kMaxRecords < records.size(); ++i) fs::remove(records[i].second);
}

}  // namespace

std::optional<compiler::Program> load_cached_program(const ir::Graph& graph, const compiler::CompileOptions& options) {
  const fs::path path = record_path(graph, options);
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return std::nullopt;
  try {
    return compiler::deserialize_program(read_file(path), graph);
  } catch (const Error& e) {
    std::fprintf(stderr, "kiln: warning: compile cache: ignoring %s (%s); compiling again\n", path.c_str(), e.what());
    return std::nullopt;
  }
}

void save_cached_program(const ir::Graph& graph, const compiler::CompileOptions& options,
                         const compiler::Program& program, double compile_seconds) {
  const fs::path path = record_path(graph, options);
  if (path.empty() || compile_seconds < min_compile_seconds()) return;
  try {  // a cache that cannot be written only costs the next run a compile
    fs::create_directories(path.parent_path());
    write_file_atomic(path, compiler::serialize_program(graph, program));
    prune(path.parent_path());
  } catch (const std::exception&) {
  }
}

}  // namespace kiln::runtime
