#pragma once
// Subcommand registry of the `kiln` tool. A subcommand lives in its own
// tools/cmd_NAME.cpp and registers itself:
//
//   static int run_tokenize(const std::vector<std::string>& args);
//   KILN_COMMAND(tokenize, "encode text with a Hugging Face tokenizer", run_tokenize);
//
// args excludes the program and subcommand names. Return the exit status;
// throw kiln::Error (or any std::exception) for bad input: main prints it
// and exits with status 1.
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kiln::cli {

using CommandFn = std::function<int(const std::vector<std::string>&)>;

struct Command {
  std::string help;
  CommandFn run;
};

std::map<std::string, Command>& commands();

struct Registrar {
  Registrar(const char* name, const char* help, CommandFn fn) {
    commands()[name] = Command{help, std::move(fn)};
  }
};

}  // namespace kiln::cli

#define KILN_COMMAND(name, help, fn) \
  static ::kiln::cli::Registrar kiln_command_registrar_##name(#name, help, fn)

// For names that are not identifiers ("demo-data").
#define KILN_COMMAND_NAMED(id, name, help, fn) \
  static ::kiln::cli::Registrar kiln_command_registrar_##id(name, help, fn)
