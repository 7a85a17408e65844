#pragma once
// MPI across processes and hosts (OpenMPI). kiln initialises MPI only when
// the process was started by mpirun (its environment says so), with
// MPI_THREAD_MULTIPLE: a replica's stream thread runs the all-reduces of its
// compiled steps while the host thread may meet the others in a rendezvous.
// The two use separate communicators, so their calls never pair up wrongly.
//
// No collective waits forever: each is nonblocking underneath, polled until
// done, and a process that has waited the ddp_timeout (distributed/timeout.h) for
// the others prints which ranks did not arrive and ends the run (MPI_Abort).
#include <cstdint>
#include <span>
#include <string>

namespace kiln::dist::mpi {

// True when this process runs under mpirun with more than one process.
bool launched();
// MPI_Init_thread once (no-op when !launched()); MPI_Finalize runs at exit.
void init();
bool initialized();
int rank();  // 0 without MPI
int size();  // 1 without MPI
// This process's rank among the processes on its host (MPI_COMM_TYPE_SHARED);
// 0 without MPI. `--device cuda` under mpirun uses cuda:<local_rank>, one
// GPU per process.
int local_rank();

// In-place sums over all processes (device and host communicators).
void all_reduce_device(float* data, int64_t n);
void all_reduce_host(double* data, int64_t n);
// Segment k of `data` (sizes[k] elements, one after the other) from process
// roots[k] to every process (device communicator).
void broadcast_device(float* data, std::span<const int64_t> sizes, std::span<const int> roots);
// Equal when every process passed the same value (for rendezvous tags):
// returns the minimum and maximum over the processes. `what` names the
// operation in a timeout's message ("rendezvous 'save'").
void min_max_host(uint64_t value, uint64_t* min, uint64_t* max, const std::string& what);
void barrier_host();
// Ends every process (after an error in one of them, so none hangs).
[[noreturn]] void abort(int code);

}  // namespace kiln::dist::mpi
