#pragma once
// Per-device runtime state: the live tensors (to find what mark_step() must
// materialise), the compile cache, and the execution stream.
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/compiler/program.h"
#include "kiln/core/buffer.h"
#include "kiln/ir/graph.h"
#include "kiln/runtime/stream.h"

namespace kiln {
struct TensorImpl;
}
namespace kiln::backend {
class Backend;
struct Plan;
}  // namespace kiln::backend

namespace kiln::runtime {

struct Executable {
  compiler::Program program;
  std::unique_ptr<backend::Plan> plan;  // the program prepared by its device's backend
  ~Executable();
};

class DeviceContext {
 public:
  static DeviceContext& get(Device device);

  void register_tensor(TensorImpl* t);
  void unregister_tensor(TensorImpl* t);

  // Compiles (or finds) and queues the graph computing every pending live
  // tensor of this device; returns without waiting.
  void mark_step();
  // Same for the given tensors only (reading a value, eager mode). Buffers
  // are never donated here: other pending work may still read them.
  void materialize(const std::vector<std::shared_ptr<TensorImpl>>& tensors);

  Stream& stream() { return stream_; }
  // Runs fn on the stream after everything queued so far (PyTorch/XLA's step
  // closures): it may read the values of tensors materialised by earlier
  // mark_step() calls without stalling the host. It must not trace new work.
  void add_step_closure(std::function<void()> fn);
  size_t cache_size() const;
  void clear_cache();
  // The error of the first step that failed to run since the last call
  // (empty if none did), and forgets it. A step fed by a failed step is not
  // counted: it fails with the same error.
  std::string take_failure();

  explicit DeviceContext(Device device);

 private:
  void run(const std::vector<std::shared_ptr<TensorImpl>>& tensors, bool allow_donation);
  void note_failure(const std::string& error);  // on the stream
  std::shared_ptr<Executable> lookup_or_compile(const ir::Graph& g, const std::vector<ir::NodePtr>& params);
  std::string compile_reason(const ir::Graph& g, const std::vector<ir::NodePtr>& params);
  std::shared_ptr<Storage> arena_for(size_t nbytes);

  Device device_;
  mutable std::mutex mu_;
  std::unordered_set<TensorImpl*> live_;

  struct CacheEntry {
    ir::Graph graph;
    std::shared_ptr<Executable> exe;
  };
  std::list<CacheEntry> lru_;  // most recent first
  std::unordered_map<uint64_t, std::vector<std::list<CacheEntry>::iterator>> index_;
  size_t capacity_;

  // Per shape-agnostic structure: parameter shapes and names last compiled,
  // and how many times it has been compiled (to explain and warn).
  struct History {
    std::vector<Shape> shapes;
    std::vector<std::string> names;
    int compiles = 0;
    bool warned = false;
  };
  std::unordered_map<uint64_t, History> history_;

  // The temporaries' memory, one for every program run here (see arena_for; under mu_).
  std::shared_ptr<Storage> arena_;

  std::mutex failure_mu_;
  std::string failure_;  // see take_failure()

  Stream stream_;
};

}  // namespace kiln::runtime

namespace kiln {

// Compiles and queues everything pending on `device`; returns at once.
void mark_step(Device device = Device::cpu());
// Blocks until the device has run everything queued (xm.wait_device_ops).
void wait_device_ops(Device device = Device::cpu());
// The same for every device in use: a program calls it before it exits, so
// no queued step runs while the libraries it calls are being torn down.
void wait_all_device_ops();
// The error of the first step that failed on `device` since the last call,
// or empty; returns at once (steps still queued are not waited for). A
// training loop calls it between steps to stop at the first failure.
std::string take_step_failure(Device device = Device::cpu());
// Runs fn on `device`'s stream once the steps queued so far have run.
void add_step_closure(std::function<void()> fn, Device device = Device::cpu());
// TF32 tensor-core math for f32 matrix products on CUDA devices
// (torch.backends.cuda.matmul.allow_tf32 = True; TrainingArguments' tf32):
// the products' inputs keep 10 bits of mantissa, accumulation stays fp32.
// Off by default; read when each step runs; the CPU backend ignores it.
void set_allow_tf32(bool on);
// KILN_EAGER=1 (or set_eager_mode(true)) runs each op as it is traced.
bool eager_mode();
void set_eager_mode(bool on);

}  // namespace kiln
