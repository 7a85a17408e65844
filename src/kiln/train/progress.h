#pragma once
// The progress line of training, evaluation and prediction on stderr (HF's
// tqdm bar): units done of the total, samples per second and the time left.
// The rate counts units when they complete on the device, not when the host
// queues them (the host runs ahead of the device), over the last few
// completions, so the first unit's compilation does not hide the steady rate
// for long. On a terminal the line redraws in place (at most ten times a
// second); elsewhere (when asked for with --disable_tqdm false) it is a line
// at most once a second. The last unit is always shown.
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

namespace kiln::train {

class ProgressLine {
 public:
  using Clock = std::function<double()>;  // seconds from any fixed point
  // `label` starts the line ("" for training, "eval", "predict"); `unit` names
  // what is counted ("step", "batch"); `initial` units were done before (a
  // resumed run). A disabled line draws nothing.
  ProgressLine(std::string label, std::string unit, int64_t total, double samples_per_unit, bool enabled,
               bool terminal, int64_t initial = 0, Clock clock = {});
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // `done` units have completed (thread-safe: device threads call it); the
  // line shows `detail` ("loss 0.6931 | lr 5e-05") after the counts.
  void completed(int64_t done, const std::string& detail = "");
  // Ends the line (a newline on a terminal) if one was drawn.
  void finish();

  // The line after `done` units, now (no terminal control characters).
  std::string text(int64_t done, const std::string& detail) const;
  // Units per second over the recent completions (0 before the first).
  double units_per_second() const;

 private:
  double now() const;
  std::string label_, unit_;
  int64_t total_;
  double samples_per_unit_;
  bool enabled_, terminal_;
  Clock clock_;
  double last_printed_ = -1e300;
  bool drawn_ = false;
  std::deque<std::pair<int64_t, double>> window_;  // (units done, when): the start, then the last completions
  mutable std::mutex mu_;
};

// H:MM:SS of `seconds`, rounded.
std::string format_duration(double seconds);

}  // namespace kiln::train
