#include "kiln/dist/mpi.h"

// The C API only (OpenMPI would pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "kiln/core/error.h"

namespace kiln::dist::mpi {

namespace {
std::once_flag g_once;
bool g_initialized = false;
int g_rank = 0, g_size = 1;
int g_local_rank = 0;  // among the processes of this host
MPI_Comm g_device = MPI_COMM_NULL, g_host = MPI_COMM_NULL;

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("MPI: ") + what + " failed: " + std::string(msg, len));
}

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_device != MPI_COMM_NULL) MPI_Comm_free(&g_device);
  if (g_host != MPI_COMM_NULL) MPI_Comm_free(&g_host);
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
    check(MPI_Comm_dup(MPI_COMM_WORLD, &g_device), "MPI_Comm_dup");
    check(MPI_Comm_dup(MPI_COMM_WORLD, &g_host), "MPI_Comm_dup");
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
  // MPI counts are int: reduce in pieces below 2^31 elements.
  for (int64_t at = 0; at < n; at += (int64_t{1} << 30)) {
    int count = static_cast<int>(std::min<int64_t>(n - at, int64_t{1} << 30));
    check(MPI_Allreduce(MPI_IN_PLACE, data + at, count, MPI_FLOAT, MPI_SUM, g_device), "MPI_Allreduce");
  }
}

void broadcast_device(float* data, int64_t n, int root) {
  KILN_ASSERT(g_initialized);
  for (int64_t at = 0; at < n; at += (int64_t{1} << 30)) {
    int count = static_cast<int>(std::min<int64_t>(n - at, int64_t{1} << 30));
    check(MPI_Bcast(data + at, count, MPI_FLOAT, root, g_device), "MPI_Bcast");
  }
}

void all_reduce_host(double* data, int64_t n) {
  KILN_ASSERT(g_initialized);
  check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_DOUBLE, MPI_SUM, g_host), "MPI_Allreduce");
}

void min_max_host(uint64_t value, uint64_t* min, uint64_t* max) {
  KILN_ASSERT(g_initialized);
  unsigned long long v = value, lo = 0, hi = 0;
  check(MPI_Allreduce(&v, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, g_host), "MPI_Allreduce");
  check(MPI_Allreduce(&v, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, g_host), "MPI_Allreduce");
  *min = lo;
  *max = hi;
}

void barrier_host() {
  KILN_ASSERT(g_initialized);
  check(MPI_Barrier(g_host), "MPI_Barrier");
}

void abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (g_initialized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace kiln::dist::mpi
