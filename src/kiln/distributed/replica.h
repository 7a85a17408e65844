#pragma once
// Data-parallel replicas (PyTorch/XLA's xmp.spawn + xm.rendezvous).
//
// A process runs one or more replicas, each on its own logical device
// (cpu:0, cpu:1, ...) with its own execution stream and an equal share of the
// cores; under `mpirun` several processes do the same. Replica r of process p
// has the global rank p * local_count + r; global rank 0 is the master, the
// one that logs and writes. Replicas meet in all-reduces inside their
// compiled steps (see collectives.h) and in rendezvous() on the host.
#include <functional>
#include <string>

#include "kiln/core/device.h"

namespace kiln {

struct ReplicaInfo {
  int local_index = 0, local_count = 1;     // replicas of this process
  int process_rank = 0, process_count = 1;  // MPI processes (1 without mpirun)
  Device device = Device::cpu();
  int64_t group = -1;  // the in-process replica group (-1: not inside spawn())

  int global_rank() const { return process_rank * local_count + local_index; }
  int world_size() const { return process_count * local_count; }
  bool is_master() const { return global_rank() == 0; }
};

// The replica the calling thread belongs to; outside spawn(), a lone replica
// on cpu:0 (with the MPI rank and size when launched by mpirun).
const ReplicaInfo& this_replica();

// Runs fn(local_index) for n replicas of this process, each on its own thread
// and device cpu:local_index, and returns when all have. A replica that throws
// aborts the others (their collectives and rendezvous throw) and spawn()
// rethrows the first error. n == 1 runs fn on the calling thread.
void spawn(const std::function<void(int)>& fn, int n);

// Blocks until every replica of every process has reached rendezvous with the
// same tag (a different tag is an error naming both, not a hang; a replica
// that does not come within the ddp_timeout, distributed/timeout.h, is an error
// naming it).
void rendezvous(const std::string& tag);

}  // namespace kiln
