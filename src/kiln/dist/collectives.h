#pragma once
// Collectives between replicas: within a process through shared memory (the
// replicas' threads meet at barriers and each sums a slice), across processes
// with MPI (the first replica of each process takes the process-local sum to
// MPI_Allreduce). Summation order is fixed (replica 0, 1, ... then MPI's), so
// every replica ends with bit-identical values.
#include <cstdint>
#include <span>
#include <string>

#include "kiln/core/device.h"

namespace kiln::dist {

// The device layer's all-reduce kernel: replica `replica` of in-process group
// `group` contributes the concatenation of `inputs` (segment k has sizes[k]
// floats) and receives, in `out`, the elementwise sum over all replicas of all
// processes, times `scale`. Every replica must call it with the same sizes.
// Throws kiln::Error when the group was aborted.
void all_reduce(int64_t group, int replica, std::span<const float* const> inputs, std::span<const int64_t> sizes,
                float* out, double scale);

// The other half of sharded optimizer state (ZeRO-1): segment k of the result
// is replica roots[k]'s input k (a global rank), sent to every replica. Each
// replica passes its own inputs (what non-roots pass is not read).
void broadcast(int64_t group, int replica, std::span<const float* const> inputs, std::span<const int64_t> sizes,
               std::span<const int64_t> roots, float* out);

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
};
Stats stats();
void reset_stats();

}  // namespace kiln::dist
