#pragma once
// Runs the kiln command for an end-to-end test (KILN_BIN is test_cli's
// compile definition): its exit status and its output.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kiln::testing {

struct KilnRun {
  int status = -1;  // the exit status; -1 when killed by a signal or the time limit
  std::string output;  // stdout and stderr together
};

// `kiln args`, no standard input, at most `seconds`; the output goes
// through `dir`/log.txt.
inline KilnRun run_kiln(const std::string& args, const std::filesystem::path& dir, int seconds = 120) {
  const std::filesystem::path log = dir / "log.txt";
  const std::string cmd = "timeout -s KILL " + std::to_string(seconds) + " " KILN_BIN " " + args + " > " +
                          log.string() + " 2>&1 < /dev/null";
  const int rc = std::system(cmd.c_str());
  KilnRun r;
  r.status = WIFEXITED(rc) && WEXITSTATUS(rc) != 137 ? WEXITSTATUS(rc) : -1;
  std::ifstream f(log);
  r.output.assign(std::istreambuf_iterator<char>(f), {});
  return r;
}

}  // namespace kiln::testing
