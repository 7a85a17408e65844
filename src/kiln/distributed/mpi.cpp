#include "kiln/distributed/mpi.h"

// The C API only (OpenMPI would pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/distributed/timeout.h"

namespace kiln::dist::mpi {

namespace {
std::once_flag g_once;
bool g_initialized = false;
int g_rank = 0, g_size = 1;
int g_local_rank = 0;  // among the processes of this host
int g_tag_ub = 32767;  // the largest tag (MPI_TAG_UB; the standard's minimum until init)

// A communicator for collectives and a twin for the messages that say a rank
// has arrived at one (so that a rank that waited too long can name who did
// not come). Collectives on a channel are numbered in the order every rank
// calls them; one thread at a time uses a channel.
struct Channel {
  MPI_Comm comm = MPI_COMM_NULL, arrivals = MPI_COMM_NULL;
  uint64_t next = 0;
};
Channel g_device, g_host;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(msg, len));
}

constexpr int64_t kPiece = int64_t{1} << 30;
int piece(int64_t left) { return static_cast<int>(std::min(left, kPiece)); }

// Waiting: MPI_Test in a loop for kSpin, then naps that double up to
// kMaxNap, so that a rank waiting for a late one leaves the cores to the
// kernels. Once every rank has arrived the data is moving, and polling goes
// on without naps for kMoving (MPI progresses a transfer only inside its
// calls), then naps again: a rank stopped inside the collective.
constexpr std::chrono::microseconds kSpin{200}, kMoving{50'000}, kFirstNap{50}, kMaxNap{1000};

// One collective with a deadline. Each rank first sends every other rank a
// zero-byte arrival message tagged with the collective's number, then starts
// the nonblocking collective(s) (add()); wait() completes both. A rank that
// has waited the ddp_timeout prints a line naming the ranks whose arrival it
// never got (or, when every rank arrived, the ones that stopped inside the
// collective) and ends the run: a stopped process can only be killed.
class Collective {
 public:
  Collective(Channel& ch, std::string_view what)
      : what_(what), tag_(static_cast<int>(ch.next++ % static_cast<uint64_t>(g_tag_ub))),
        arrivals_(g_size, MPI_REQUEST_NULL) {
    sends_.reserve(g_size);
    for (int r = 0; r < g_size; ++r) {
      if (r == g_rank) continue;
      check(MPI_Irecv(nullptr, 0, MPI_BYTE, r, tag_, ch.arrivals, &arrivals_[r]), "MPI_Irecv");
      sends_.push_back(MPI_REQUEST_NULL);
      check(MPI_Isend(nullptr, 0, MPI_BYTE, r, tag_, ch.arrivals, &sends_.back()), "MPI_Isend");
    }
    missing_ = g_size - 1;
  }
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;

  // Where the next nonblocking collective's request goes.
  MPI_Request* add() { return &ops_.emplace_back(MPI_REQUEST_NULL); }

  void wait() {
    using clock = std::chrono::steady_clock;
    auto start = clock::now();  // of the wait, then of the transfer once every rank is here
    bool everyone = g_size == 1;
    Deadline deadline;
    auto nap = std::chrono::microseconds(0);
    while (true) {
      int done = 0, sent = 0;
      check(MPI_Testall(static_cast<int>(ops_.size()), ops_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      for (int r = 0; r < g_size && missing_ > 0; ++r) {
        if (arrivals_[r] == MPI_REQUEST_NULL) continue;
        int in = 0;
        check(MPI_Test(&arrivals_[r], &in, MPI_STATUS_IGNORE), "MPI_Test");
        if (in) --missing_;
      }
      check(MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &sent, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done && sent && missing_ == 0) return;
      if (deadline.passed()) give_up();
      const auto now = clock::now();
      if (missing_ == 0 && !everyone) {
        everyone = true;
        start = now;
        nap = std::chrono::microseconds(0);
      }
      if (now - start < (everyone ? kMoving : kSpin)) {
        std::this_thread::yield();
        continue;
      }
      nap = std::min(kMaxNap, nap.count() ? nap * 2 : kFirstNap);
      std::this_thread::sleep_for(nap);
    }
  }

 private:
  [[noreturn]] void give_up() {
    // The device and the host thread may both give up: one line, one abort
    // (the second thread waits here until the abort ends the process).
    static std::mutex giving_up;
    giving_up.lock();
    std::vector<int> late, others;
    for (int r = 0; r < g_size; ++r) {
      if (arrivals_[r] != MPI_REQUEST_NULL) late.push_back(r);
      if (r != g_rank) others.push_back(r);
    }
    std::string line = "ddp_timeout: ";
    if (!late.empty()) {
      line += std::string(late.size() == 1 ? "rank " : "ranks ") + rank_list(late) + " did not reach " + what_ +
              " within " + timeout_text();
    } else {  // every rank arrived, and the collective never completed
      line += std::string(others.size() == 1 ? "rank " : "one of ranks ") + rank_list(others) +
              " stopped inside " + what_ + " (it did not complete within " + timeout_text() + ")";
    }
    std::fprintf(stderr, "kiln: %s (rank %d gave up waiting; ending the run)\n", line.c_str(), g_rank);
    mpi::abort(1);
  }

  std::string what_;
  int tag_;
  std::vector<MPI_Request> arrivals_;  // from each other rank; MPI_REQUEST_NULL once it came
  int missing_ = 0;
  std::vector<MPI_Request> sends_, ops_;
};

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (Channel* ch : {&g_device, &g_host})
    for (MPI_Comm* c : {&ch->comm, &ch->arrivals})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  MPI_Finalize();
}
}  // namespace

bool launched() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(v)) return true;
  return false;
}

void init() {
  std::call_once(g_once, [] {
    if (!launched()) return;
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    std::atexit(finalize);
    KILN_CHECK(provided >= MPI_THREAD_MULTIPLE, "MPI: this MPI library provides thread level ", provided,
               ", kiln needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE, ")");
    check(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &g_size), "MPI_Comm_size");
    for (Channel* ch : {&g_device, &g_host})
      for (MPI_Comm* c : {&ch->comm, &ch->arrivals}) check(MPI_Comm_dup(MPI_COMM_WORLD, c), "MPI_Comm_dup");
    int* tag_ub = nullptr;
    int has_tag_ub = 0;
    check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub), "MPI_Comm_get_attr");
    if (has_tag_ub) g_tag_ub = *tag_ub;
    MPI_Comm node;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type");
    check(MPI_Comm_rank(node, &g_local_rank), "MPI_Comm_rank");
    check(MPI_Comm_free(&node), "MPI_Comm_free");
    g_initialized = true;
  });
}

bool initialized() { return g_initialized; }
int rank() { return g_rank; }
int size() { return g_size; }
int local_rank() { return g_local_rank; }

void all_reduce_device(float* data, int64_t n) {
  KILN_ASSERT(g_initialized);
  Collective c(g_device, "an all-reduce");
  // MPI counts are int: reduce in pieces below 2^31 elements.
  for (int64_t at = 0; at < n; at += kPiece)
    check(MPI_Iallreduce(MPI_IN_PLACE, data + at, piece(n - at), MPI_FLOAT, MPI_SUM, g_device.comm, c.add()),
          "MPI_Iallreduce");
  c.wait();
}

void broadcast_device(float* data, std::span<const int64_t> sizes, std::span<const int> roots) {
  KILN_ASSERT(g_initialized && sizes.size() == roots.size());
  Collective c(g_device, "a broadcast");
  for (size_t k = 0; k < sizes.size(); data += sizes[k], ++k)
    for (int64_t at = 0; at < sizes[k]; at += kPiece)
      check(MPI_Ibcast(data + at, piece(sizes[k] - at), MPI_FLOAT, roots[k], g_device.comm, c.add()), "MPI_Ibcast");
  c.wait();
}

void all_reduce_host(double* data, int64_t n) {
  KILN_ASSERT(g_initialized);
  Collective c(g_host, "a host all-reduce");
  check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, g_host.comm, c.add()),
        "MPI_Iallreduce");
  c.wait();
}

void min_max_host(uint64_t value, uint64_t* min, uint64_t* max, const std::string& what) {
  KILN_ASSERT(g_initialized);
  unsigned long long v = value, lo = 0, hi = 0;
  Collective c(g_host, what);
  check(MPI_Iallreduce(&v, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, g_host.comm, c.add()), "MPI_Iallreduce");
  check(MPI_Iallreduce(&v, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, g_host.comm, c.add()), "MPI_Iallreduce");
  c.wait();
  *min = lo;
  *max = hi;
}

void barrier_host() {
  KILN_ASSERT(g_initialized);
  Collective c(g_host, "a barrier");
  check(MPI_Ibarrier(g_host.comm, c.add()), "MPI_Ibarrier");
  c.wait();
}

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kiln::dist::mpi
