#pragma once
// The `kiln train` command line of a golden case: its flags from a JSON list,
// "{dir}" standing for the goldens' folder, each quoted for the shell.
#include <filesystem>
#include <string>

#include "kiln/core/json.h"

namespace kiln::testing {

inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string golden_train_command(const nlohmann::json& flags, const std::string& dir,
                                        const std::filesystem::path& out) {
  std::string cmd = "train";
  for (const auto& f : flags) {
    std::string v = f.get<std::string>();
    if (const size_t at = v.find("{dir}"); at != std::string::npos) v.replace(at, 5, dir);
    cmd += " " + shell_quoted(v);
  }
  return cmd + " --output_dir " + shell_quoted(out.string());
}

}  // namespace kiln::testing
