#pragma once
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

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("kiln_dataset_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& bytes) const {
    auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

 private:
  std::filesystem::path path_;
};

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
