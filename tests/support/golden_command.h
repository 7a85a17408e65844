#pragma once
// The `kiln train` command line of a golden case: its flags from a JSON list,
// "{dir}" standing for the goldens' folder, each quoted for the shell; the
// comparison of its training steps with the reference's; and both at once.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "kiln/core/json.h"
#include "support/run_kiln.h"

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

// Each training log entry of `state` (trainer_state.json) against `steps`, the reference's [{"loss",
// "grad_norm"}] in order: the same count, each within `relative` of the reference (float32 sums taken in
// another order).
inline void expect_steps_near(const nlohmann::json& state, const nlohmann::json& steps, double relative) {
  std::vector<nlohmann::json> got;
  for (const auto& e : state.at("log_history"))
    if (e.contains("loss")) got.push_back(e);
  ASSERT_EQ(got.size(), steps.size());
  for (size_t i = 0; i < got.size(); ++i)
    for (const char* key : {"loss", "grad_norm"}) {
      const double want = steps[i].at(key).get<double>();
      EXPECT_NEAR(got[i].at(key).get<double>(), want, relative * std::abs(want)) << "step " << i + 1 << " " << key;
    }
}

// Runs golden case `c` ({"flags": [...], "steps": [...]}) with its output in `out` (its parent as the working
// directory) and compares its training steps with the reference's (float32 sums: within 1e-5). A failed run
// is a fatal failure: callers wrap the call in ASSERT_NO_FATAL_FAILURE.
inline void train_golden_case(const nlohmann::json& c, const std::string& dir, const std::filesystem::path& out) {
  const KilnRun r = run_kiln(golden_train_command(c.at("flags"), dir, out), out.parent_path());
  ASSERT_EQ(r.status, 0) << r.output;
  expect_steps_near(read_json_file(out / "trainer_state.json"), c.at("steps"), 1e-5);
}

}  // namespace kiln::testing
