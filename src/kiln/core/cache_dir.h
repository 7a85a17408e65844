#pragma once
// Where kiln keeps its on-disk caches (compiled step programs, CUDA kernels):
// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln, each with
// one folder per cache. KILN_CACHE_DIR=off turns them off (an empty path).
// A cache that cannot be read or written only costs a compile.
#include <filesystem>
#include <string>

namespace kiln {

std::filesystem::path cache_dir(const std::string& cache);

}  // namespace kiln
