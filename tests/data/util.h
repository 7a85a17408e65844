#pragma once
#include "support/temp_dir.h"
// Scratch files for the data tests: each test writes its inputs into a fresh
// directory under the system temp dir, removed at the end of the test.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "kiln/core/error.h"

namespace kiln::testing {

using kiln::testing::TempDir;

// The message of the kiln::Error fn throws ("" and a test failure if none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a kiln::Error";
  return "";
}

}  // namespace kiln::testing

// EXPECT_CONTAINS(text, part): text (a std::string) contains part.
#define EXPECT_CONTAINS(text, part)                                                     \
  do {                                                                                  \
    const std::string kiln_text_ = (text);                                              \
    EXPECT_NE(kiln_text_.find(part), std::string::npos) << "'" << kiln_text_ << "' lacks '" << (part) << "'"; \
  } while (0)
