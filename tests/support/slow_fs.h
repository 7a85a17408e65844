#pragma once
// Runs the kiln command with tests/support/slow_fs.c preloaded, so that a test
// can kill it in the middle of a checkpoint save or removal: the library
// sleeps before each rename (or removal) of a path containing `match`. kiln
// has no hook of its own for this. KILN_BIN and KILN_SLOW_FS_LIB are
// test_cli's compile definitions.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace kiln::testing {

struct SlowFs {
  long rename_ms = 0;  // before each rename of a matching path
  long remove_ms = 0;  // before each unlink/rmdir of a matching path
  std::string match;   // the text a path must contain
};

// The variables that preload slow_fs with `slow`. An AddressSanitizer build
// wants its runtime first among the loaded libraries; slow_fs (built without
// the sanitizer) coming before it is harmless, so that check is turned off.
inline std::vector<std::pair<std::string, std::string>> slow_fs_env(const SlowFs& slow) {
  std::string asan = "verify_asan_link_order=0";
  if (const char* had = std::getenv("ASAN_OPTIONS"); had && *had) asan = std::string(had) + ":" + asan;
  return {{"LD_PRELOAD", KILN_SLOW_FS_LIB},
          {"ASAN_OPTIONS", asan},
          {"SLOW_FS_RENAME_MS", std::to_string(slow.rename_ms)},
          {"SLOW_FS_REMOVE_MS", std::to_string(slow.remove_ms)},
          {"SLOW_FS_MATCH", slow.match}};
}

// The same as words for env(1): 'K=V' ...
inline std::string slow_fs_env_words(const SlowFs& slow) {
  std::string words;
  for (const auto& [k, v] : slow_fs_env(slow)) words += " '" + k + "=" + v + "'";
  return words;
}

// Empty when kiln runs with slow_fs preloaded, else why it does not (the
// tests that need it skip with that message).
inline std::string slow_fs_unavailable() {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path();
  const fs::path ready = dir / ("kiln_slow_fs_ready_" + std::to_string(::getpid()));
  const fs::path log = dir / ("kiln_slow_fs_log_" + std::to_string(::getpid()));
  fs::remove(ready);
  const std::string cmd = "env" + slow_fs_env_words({}) + " 'SLOW_FS_READY=" + ready.string() + "' " KILN_BIN
                          " --help > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  const std::string output(std::istreambuf_iterator<char>(in), {});
  const bool loaded = fs::exists(ready);
  fs::remove(ready);
  fs::remove(log);
  if (rc == 0 && loaded) return "";
  return std::string("kiln does not run with " KILN_SLOW_FS_LIB " preloaded (LD_PRELOAD) here: exit status ") +
         std::to_string(rc) + (loaded ? "" : ", the library was not loaded") + "; output:\n" + output;
}

}  // namespace kiln::testing
