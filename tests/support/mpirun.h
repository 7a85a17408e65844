#pragma once
// The kiln command (KILN_BIN) in two MPI processes on this machine, for the
// command's end-to-end tests.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace kiln::testing {

inline bool has_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

// `kiln ARGS` in two MPI processes, output to `log`, killed after `seconds`;
// returns std::system's status. Root needs OpenMPI's explicit consent.
// OpenMPI keeps some allocations until exit (in components it has already
// unloaded, so no suppression can name them): in sanitizer builds the MPI
// processes skip the leak check, not the memory-error checks.
inline int mpirun_kiln(int seconds, const std::string& args, const std::filesystem::path& log) {
  // Each run keeps its Open MPI session directory in a folder of its own: ctest runs the MPI tests side by side,
  // and with the shared default (/tmp/ompi.<host>.<uid>) one run's cleanup can remove the folder while the other
  // creates its own inside it ("A call to mkdir was unable to create the desired directory"). Short, as the
  // session directory holds Unix sockets.
  char session[] = "/tmp/kiln-mpi-XXXXXX";
  if (!::mkdtemp(session)) return -1;
  const std::string cmd = "timeout " + std::to_string(seconds) +
                          " mpirun -np 2 --oversubscribe --bind-to none -x ASAN_OPTIONS=detect_leaks=0" +
                          " --mca orte_tmpdir_base " + session + (geteuid() == 0 ? " --allow-run-as-root" : "") +
                          " " KILN_BIN " " + args + " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::error_code ec;
  std::filesystem::remove_all(session, ec);
  return rc;
}

}  // namespace kiln::testing
