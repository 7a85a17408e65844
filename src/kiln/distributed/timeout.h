#pragma once
// How long a replica waits for the others (HF's ddp_timeout, 1800 s by
// default): in a collective or a rendezvous, a replica that has waited this
// long gives up. In-process replicas then fail with an error that names the
// replicas that did not arrive; MPI processes print that line and end the
// whole run (MPI_Abort), since a stopped process cannot be waited out.
#include <chrono>
#include <string>
#include <vector>

namespace kiln::dist {

// Seconds, > 0; kept to at most ten years (a deadline must fit steady_clock).
void set_timeout(double seconds);
std::chrono::milliseconds timeout();

// The end of a wait of one ddp_timeout (times `patience`) from now. Time
// this process spends frozen (SIGSTOP, a suspended machine) does not count:
// a waiter checks passed() at least every kCheck, and a longer gap between
// two checks is added back, so a process that comes back from a stop does
// not blame the others for its own absence.
class Deadline {
 public:
  static constexpr std::chrono::milliseconds kCheck{250};
  explicit Deadline(int patience = 1);
  bool passed();
  // When the waiter should check next: the deadline or kCheck from now.
  std::chrono::steady_clock::time_point next_check() const;

 private:
  std::chrono::steady_clock::time_point end_, last_;
};

// "5 s", "0.25 s": the timeout as messages write it.
std::string timeout_text();
// "1", "1, 3": ranks for a message.
std::string rank_list(const std::vector<int>& ranks);

}  // namespace kiln::dist
