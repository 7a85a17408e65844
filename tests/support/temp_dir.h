#pragma once
// A fresh directory under the system temp dir, removed with everything in it
// when the test ends. Named after the process, a counter and the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kiln::testing {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = "kiln_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
                       (info ? std::string(info->name()) : std::string("x"));
    path_ = std::filesystem::temp_directory_path() / name;
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
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  // Writes a file in the directory; returns its path.
  std::filesystem::path write(const std::string& name, const std::string& bytes) const {
    auto p = path_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // Names of everything in the directory, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace kiln::testing
