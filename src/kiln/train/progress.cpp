#include "kiln/train/progress.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace kiln::train {

namespace {
// Completions the rate is measured over: recent enough to follow a change of pace, enough to be steady.
constexpr size_t kWindow = 20;
}  // namespace

std::string format_duration(double s) {
  const auto t = static_cast<int64_t>(std::max(0.0, s) + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60),
                (long long)(t % 60));
  return buf;
}

ProgressLine::ProgressLine(std::string label, std::string unit, int64_t total, double samples_per_unit, bool enabled,
                           bool terminal, int64_t initial, Clock clock)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(std::max<int64_t>(total, 1)),
      samples_per_unit_(samples_per_unit),
      enabled_(enabled),
      terminal_(terminal),
      clock_(std::move(clock)) {
  window_.emplace_back(initial, now());
}

ProgressLine::~ProgressLine() { finish(); }

double ProgressLine::now() const {
  if (clock_) return clock_();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ProgressLine::units_per_second() const {
  // The window starts at the start until the first completions push it out: the first unit's compilation
  // counts until there are enough completions after it.
  if (window_.size() < 2) return 0;
  const auto [first_done, first_t] = window_.front();
  const auto [last_done, last_t] = window_.back();
  return static_cast<double>(last_done - first_done) / std::max(last_t - first_t, 1e-9);
}

std::string ProgressLine::text(int64_t done, const std::string& detail) const {
  const double rate = units_per_second();
  const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
  char head[160];
  std::snprintf(head, sizeof head, "%s%s%3d%% | %s %lld/%lld", label_.c_str(), label_.empty() ? "" : " ",
                static_cast<int>(100 * done / total_), unit_.c_str(), (long long)done, (long long)total_);
  char tail[96];
  std::snprintf(tail, sizeof tail, " | %.1f samples/s | ETA %s", rate * samples_per_unit_,
                format_duration(eta).c_str());
  return std::string(head) + (detail.empty() ? "" : " | " + detail) + tail;
}

void ProgressLine::completed(int64_t done, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  const double t = now();
  window_.emplace_back(done, t);
  if (window_.size() > kWindow + 1) window_.pop_front();
  if (!enabled_) return;
  // tqdm's pace: a terminal redraws at most ten times a second, a log gets a line a second; the last unit always.
  if (t - last_printed_ < (terminal_ ? 0.1 : 1.0) && done < total_) return;
  last_printed_ = t;
  if (terminal_) std::fprintf(stderr, "\r\033[K%s", text(done, detail).c_str());
  else std::fprintf(stderr, "%s\n", text(done, detail).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressLine::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (drawn_ && terminal_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace kiln::train
