// kiln env: the KILN_* environment variables kiln reads (core/env.h's table),
// each with its default, the value set now and its meaning.
#include <cstdio>
#include <cstdlib>

#include "command.h"
#include "flags.h"
#include "kiln/core/env.h"

namespace {

constexpr const char* kUsage = "usage: kiln env";

int run_env(const std::vector<std::string>& args) {
  kiln::cli::Flags flags("env", {}, kUsage);
  flags.parse(args);
  if (flags.help()) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  for (const kiln::EnvVar& v : kiln::env_vars()) {
    const std::string name(v.name);
    const char* value = std::getenv(name.c_str());
    const bool set = value && *value;  // empty counts as unset, as env_value reads it
    std::printf("%s=%s%s\n    %.*s\n", name.c_str(), kiln::env_value(v.name).c_str(), set ? "  (set)" : "  (default)",
                static_cast<int>(v.meaning.size()), v.meaning.data());
  }
  return 0;
}

}  // namespace

KILN_COMMAND(env, "list the KILN_* environment variables, their defaults and values", run_env);
