#pragma once
#include "support/temp_dir.h"
// Helpers for the io tests: a temporary directory removed at the end of the
// test, raw safetensors files built byte by byte, and error-message matching.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "kiln/core/error.h"
#include "kiln/core/atomic_file.h"

namespace kiln::io::testing {

using kiln::testing::TempDir;

// u64 little-endian length + header (as given, unpadded) + data.
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + data;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Runs fn, expecting a kiln::Error whose message contains every fragment.
inline ::testing::AssertionResult throws_with(const std::function<void()>& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const kiln::Error& e) {
    std::string what = e.what();
    for (const auto& f : fragments)
      if (what.find(f) == std::string::npos)
        return ::testing::AssertionFailure() << "message '" << what << "' lacks '" << f << "'";
    return ::testing::AssertionSuccess() << what;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kiln exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

}  // namespace kiln::io::testing
