#pragma once
// Collectives between replicas: within a process through shared memory (the
// replicas' threads meet at barriers and each sums a slice), across processes
// with MPI (the first replica of each process takes the process-local sum to
// MPI_Allreduce). Summation order is fixed (replica 0, 1, ... then MPI's), so
// every replica ends with bit-identical values.
#include <cstdint>
#include <functional>
#include <future>
#include <span>
#include <string>

#include "kiln/core/device.h"

namespace kiln::dist {

// The device layer's collectives. Each replica's collectives go, in order,
// to a thread of its own (submit) and work in place on a buffer that holds
// the replica's concatenated inputs, so the step goes on computing meanwhile:
// - all_reduce_in_place: the elementwise sum over every replica of every
//   process, times scale, summed in a fixed order (replica 0, 1, ... then
//   MPI's), so every replica ends with bit-identical values;
// - broadcast_in_place: segment k becomes replica roots[k]'s (a global rank)
//   segment k (sharded optimizer state, ZeRO-1).
// Every replica must pass the same sizes. They throw kiln::Error when the
// group was aborted, or when a replica did not arrive within the ddp_timeout
// (distributed/timeout.h; the error names it).
std::shared_future<void> submit(int64_t group, int replica, std::function<void()> task);
void all_reduce_in_place(int64_t group, int replica, float* buf, int64_t total, double scale);
void broadcast_in_place(int64_t group, int replica, float* buf, std::span<const int64_t> sizes,
                        std::span<const int64_t> roots);

// Sum of `value` over every replica of every process (host side; the calling
// thread must be a replica of spawn(), or the lone replica of a process).
double all_reduce_host(double value);

// Stops the group: replicas waiting in (or later entering) a collective or a
// rendezvous throw an error that carries `why`. Used when a replica fails.
void abort_group(int64_t group, const std::string& why);
// The group `device` belongs to while a spawn() runs, or -1.
int64_t group_of(Device device);
// Throws when this thread's replica group was aborted.
void throw_if_aborted();

// Counters for the metrics report: all-reduces run by this process (counted
// once per collective, not once per replica), bytes reduced, and the time the
// first replica spent inside them (waiting for the others included).
struct Stats {
  int64_t all_reduces = 0;
  int64_t bytes = 0;
  double seconds = 0;
  int64_t overlapped = 0;  // kernels the steps ran while a collective was in flight
};
void record_overlap(int64_t kernels);
Stats stats();
void reset_stats();

}  // namespace kiln::dist
