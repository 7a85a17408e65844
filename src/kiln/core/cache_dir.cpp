#include "kiln/core/cache_dir.h"

#include <cstdlib>

#include "kiln/core/env.h"

namespace kiln {

std::filesystem::path cache_dir(const std::string& cache) {
  namespace fs = std::filesystem;
  if (const std::string d = env_value("KILN_CACHE_DIR"); !d.empty()) {
    if (d == "off") return {};
    return fs::path(d) / cache;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "kiln" / cache;
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "kiln" / cache;
  return {};
}

}  // namespace kiln
