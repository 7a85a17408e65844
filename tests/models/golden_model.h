#pragma once
// A golden model directory under tests/goldens (e.g. "gpt2/gpt2_lm"), loaded
// once per test binary and shared by the tests that generate from it.
#include <map>
#include <memory>
#include <string>

#include "kiln/models/model.h"

namespace kiln::testing {

inline models::PreTrainedModel& golden_model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<models::PreTrainedModel>> models;
  auto& m = models[name];
  if (!m) m = models::from_pretrained(std::string(KILN_TEST_DATA_DIR) + "/" + name);
  return *m;
}

}  // namespace kiln::testing
