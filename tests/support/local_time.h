#pragma once
// A golden file's "now" ("2024-07-26T09:30:15", local time), as the time point
// strftime_now() in chat templates formats.
#include <chrono>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <string>

namespace kiln::testing {

inline std::chrono::system_clock::time_point local_time(const std::string& iso) {
  std::tm tm{};
  std::istringstream in(iso);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  tm.tm_isdst = -1;
  return std::chrono::system_clock::from_time_t(std::mktime(&tm));
}

}  // namespace kiln::testing
