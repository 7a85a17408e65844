#include "kiln/io/cache_dir.h"

#include <cstdlib>

namespace kiln::io {

std::filesystem::path cache_dir(const std::string& cache) {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("KILN_CACHE_DIR"); d && *d) {
    if (std::string(d) == "off") return {};
    return fs::path(d) / cache;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "kiln" / cache;
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache" / "kiln" / cache;
  return {};
}

}  // namespace kiln::io
