#include "kiln/distributed/timeout.h"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "kiln/core/error.h"

namespace kiln::dist {

namespace {
// HF's default ddp_timeout: 30 minutes.
std::atomic<int64_t> g_timeout_ms{1800 * 1000};
// A gap between two checks this long means the process was frozen (the
// waiters check every Deadline::kCheck; a loaded machine may delay that).
constexpr std::chrono::seconds kFrozen{1};
}  // namespace

void set_timeout(double seconds) {
  KILN_CHECK(seconds > 0, "ddp_timeout must be a positive number of seconds, got ", seconds);
  constexpr double kTenYears = 10 * 365 * 24 * 3600.0;
  g_timeout_ms = std::max<int64_t>(1, static_cast<int64_t>(std::min(seconds, kTenYears) * 1000));
}

std::chrono::milliseconds timeout() { return std::chrono::milliseconds(g_timeout_ms.load()); }

Deadline::Deadline(int patience)
    : end_(std::chrono::steady_clock::now() + timeout() * patience), last_(std::chrono::steady_clock::now()) {}

bool Deadline::passed() {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ > kCheck + kFrozen) end_ += now - last_;
  last_ = now;
  return now >= end_;
}

std::chrono::steady_clock::time_point Deadline::next_check() const {
  return std::min(end_, std::chrono::steady_clock::now() + kCheck);
}

std::string timeout_text() {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(g_timeout_ms.load()) / 1000.0);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace kiln::dist
