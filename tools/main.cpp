// kiln: command-line entry point. Dispatches to the registered subcommands.
#include <cstdio>
#include <exception>

#include "command.h"
#include "kiln/distributed/mpi.h"
#include "kiln/runtime/context.h"

namespace kiln::cli {
std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> table;
  return table;
}
}  // namespace kiln::cli

static void usage() {
  std::fprintf(stderr, "usage: kiln <command> [options]\n\ncommands:\n");
  for (const auto& [name, cmd] : kiln::cli::commands())
    std::fprintf(stderr, "  %-12s %s\n", name.c_str(), cmd.help.c_str());
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    usage();
    return argc < 2 ? 2 : 0;
  }
  auto& table = kiln::cli::commands();
  auto it = table.find(argv[1]);
  if (it == table.end()) {
    std::fprintf(stderr, "kiln: unknown command '%s'\n", argv[1]);
    usage();
    return 2;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  try {
    kiln::dist::mpi::init();  // only under mpirun
    const int status = it->second.run(args);
    kiln::wait_all_device_ops();  // a step still queued must not outlive oneDNN's static engine
    return status;
  } catch (const std::exception& e) {
    // Allocations that fail where no layer names what was being built.
    const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
    std::fprintf(stderr, "kiln %s: error: %s\n", argv[1], oom ? "out of memory (std::bad_alloc)" : e.what());
    // Under mpirun the other processes would wait for this one forever.
    if (kiln::dist::mpi::initialized() && kiln::dist::mpi::size() > 1) kiln::dist::mpi::abort(1);
    try {
      kiln::wait_all_device_ops();
    } catch (const std::exception&) {  // (a queued step's own failure: the first error is the one reported)
    }
    return 1;
  }
}
