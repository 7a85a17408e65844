#pragma once
// The device layer's metrics, like PyTorch/XLA's metrics report: compiles
// (with the reason for each), cache hits, executions and their time, bytes
// moved between host and device, and time the host waited for values.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::metrics {

struct Snapshot {
  int64_t compiles = 0;             // programs made for new graphs (compiled or loaded)
  double compile_seconds = 0;
  int64_t compiles_from_disk = 0;   // of them, loaded from the on-disk compile cache
  int64_t cache_hits = 0;
  int64_t executions = 0;
  double execute_seconds = 0;
  int64_t failed_executions = 0;
  int64_t host_to_device_bytes = 0;
  int64_t device_to_host_bytes = 0;
  double host_wait_seconds = 0;  // host blocked reading values
  double data_wait_seconds = 0;  // training loop blocked waiting for input batches
  int64_t arena_bytes = 0;       // largest arena of a compiled step
  int64_t all_reduces = 0;       // collectives between replicas (dist::stats())
  int64_t all_reduce_bytes = 0;
  double all_reduce_seconds = 0;
  int64_t overlapped_kernels = 0;  // kernels run while a collective was in flight
  std::vector<std::string> compile_reasons;  // one per compile, oldest first
};

Snapshot snapshot();
void reset();
std::string report();        // human-readable
nlohmann::json to_json();

// Recording (used by the runtime).
void record_compile(double seconds, std::string reason, int64_t arena_bytes, bool from_disk = false);
void record_cache_hit();
void record_execution(double seconds, bool failed);
void record_transfer(int64_t host_to_device, int64_t device_to_host);
void record_host_wait(double seconds);
void record_data_wait(double seconds);

}  // namespace kiln::metrics
