#include "kiln/runtime/metrics.h"

#include "kiln/distributed/collectives.h"

#include <cstdio>
#include <mutex>
#include <sstream>

namespace kiln::metrics {

namespace {
std::mutex g_mu;
Snapshot g_m;
constexpr size_t kMaxReasons = 1000;
}  // namespace

Snapshot snapshot() {
  std::lock_guard<std::mutex> lock(g_mu);
  Snapshot m = g_m;
  dist::Stats d = dist::stats();
  m.all_reduces = d.all_reduces;
  m.all_reduce_bytes = d.bytes;
  m.all_reduce_seconds = d.seconds;
  m.overlapped_kernels = d.overlapped;
  return m;
}

void reset() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_m = Snapshot{};
  dist::reset_stats();
}

void record_compile(double seconds, std::string reason, int64_t arena_bytes, bool from_disk) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_m.compiles;
  g_m.compiles_from_disk += from_disk;
  g_m.compile_seconds += seconds;
  g_m.arena_bytes = std::max(g_m.arena_bytes, arena_bytes);
  if (g_m.compile_reasons.size() < kMaxReasons) g_m.compile_reasons.push_back(std::move(reason));
}

void record_cache_hit() {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_m.cache_hits;
}

void record_execution(double seconds, bool failed) {
  std::lock_guard<std::mutex> lock(g_mu);
  ++g_m.executions;
  g_m.execute_seconds += seconds;
  g_m.failed_executions += failed;
}

void record_transfer(int64_t h2d, int64_t d2h) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_m.host_to_device_bytes += h2d;
  g_m.device_to_host_bytes += d2h;
}

void record_host_wait(double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_m.host_wait_seconds += seconds;
}

void record_data_wait(double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_m.data_wait_seconds += seconds;
}

std::string report() {
  Snapshot m = snapshot();
  std::ostringstream os;
  char line[256];
  os << "kiln metrics report\n";
  std::snprintf(line, sizeof line, "  CompileTime:      %lld compiles (%lld from the disk cache), %.3f s total\n",
                static_cast<long long>(m.compiles), static_cast<long long>(m.compiles_from_disk), m.compile_seconds);
  os << line;
  std::snprintf(line, sizeof line, "  CacheHits:        %lld\n", static_cast<long long>(m.cache_hits));
  os << line;
  std::snprintf(line, sizeof line, "  ExecuteTime:      %lld executions (%lld failed), %.3f s total\n",
                static_cast<long long>(m.executions), static_cast<long long>(m.failed_executions),
                m.execute_seconds);
  os << line;
  std::snprintf(line, sizeof line, "  TransferToDevice: %lld bytes\n  TransferToHost:   %lld bytes\n",
                static_cast<long long>(m.host_to_device_bytes), static_cast<long long>(m.device_to_host_bytes));
  os << line;
  std::snprintf(line, sizeof line, "  HostWaitTime:     %.3f s\n  DataWaitTime:     %.3f s\n  LargestArena:     %lld bytes\n",
                m.host_wait_seconds, m.data_wait_seconds, static_cast<long long>(m.arena_bytes));
  os << line;
  std::snprintf(line, sizeof line, "  AllReduce:        %lld collectives, %lld bytes, %.3f s, %lld kernels overlapped\n",
                static_cast<long long>(m.all_reduces), static_cast<long long>(m.all_reduce_bytes),
                m.all_reduce_seconds, static_cast<long long>(m.overlapped_kernels));
  os << line;
  os << "  Compile reasons:\n";
  for (size_t i = 0; i < m.compile_reasons.size(); ++i)
    os << "    #" << i + 1 << ": " << m.compile_reasons[i] << "\n";
  return os.str();
}

nlohmann::json to_json() {
  Snapshot m = snapshot();
  return nlohmann::json{{"compiles", m.compiles},
                        {"compile_seconds", m.compile_seconds},
                        {"compiles_from_disk", m.compiles_from_disk},
                        {"cache_hits", m.cache_hits},
                        {"executions", m.executions},
                        {"failed_executions", m.failed_executions},
                        {"execute_seconds", m.execute_seconds},
                        {"host_to_device_bytes", m.host_to_device_bytes},
                        {"device_to_host_bytes", m.device_to_host_bytes},
                        {"host_wait_seconds", m.host_wait_seconds},
                        {"data_wait_seconds", m.data_wait_seconds},
                        {"arena_bytes", m.arena_bytes},
                        {"all_reduces", m.all_reduces},
                        {"all_reduce_bytes", m.all_reduce_bytes},
                        {"all_reduce_seconds", m.all_reduce_seconds},
                        {"overlapped_kernels", m.overlapped_kernels},
                        {"compile_reasons", m.compile_reasons}};
}

}  // namespace kiln::metrics
