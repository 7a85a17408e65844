#include "kiln/runtime/context.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>


#include "kiln/backend/backend.h"
#include "kiln/compiler/compile.h"
#include "kiln/core/env.h"
#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"
#include "kiln/ir/builder.h"
#include "kiln/runtime/metrics.h"
#include "kiln/runtime/program_cache.h"
#include "kiln/runtime/tensor_impl.h"

namespace kiln::runtime {

namespace {
std::mutex g_contexts_mu;
bool g_shutdown = false;

struct Contexts {
  std::map<Device, std::unique_ptr<DeviceContext>> map;
  ~Contexts() {
    std::lock_guard<std::mutex> lock(g_contexts_mu);
    g_shutdown = true;
  }
};
Contexts& contexts() {
  static Contexts c;
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t cache_capacity_from_env() {
  return static_cast<size_t>(env_integer("KILN_CACHE_SIZE", 1));
}
// The backend that runs a device's programs.
backend::Backend& backend_of(Device device) {
  backend::Backend* b = backend::find_backend(device.kind);
  KILN_CHECK(b, "device ", device.str(), " is not available: this build has no ", device.kind == DeviceKind::CUDA ? "CUDA" : "such",
             " backend (configure with -DKILN_CUDA=ON on a machine with the CUDA toolkit)");
  return *b;
}

// KILN_DUMP=graph,program: each graph as traced and the program compiled from
// it, to stderr, as they are compiled (or read from the on-disk cache).
void dump_if_asked(const ir::Graph& g, const compiler::Program& program, bool from_disk) {
  static const bool graph = env_lists("KILN_DUMP", "graph", {"graph", "program"});
  static const bool prog = env_lists("KILN_DUMP", "program", {"graph", "program"});
  if (graph) std::fprintf(stderr, "kiln graph (KILN_DUMP):\n%s\n", g.dump().c_str());
  if (prog)
    std::fprintf(stderr, "kiln program (KILN_DUMP%s):\n%s\n", from_disk ? ", from the disk cache" : "",
                 program.dump().c_str());
}
}  // namespace

Executable::~Executable() = default;

DeviceContext::DeviceContext(Device device) : device_(device), capacity_(cache_capacity_from_env()) {}

DeviceContext& DeviceContext::get(Device device) {
  backend_of(device).open(device);
  std::lock_guard<std::mutex> lock(g_contexts_mu);
  auto& map = contexts().map;
  auto it = map.find(device);
  // (Made before it is inserted: a constructor that throws, on a malformed
  // KILN_CACHE_SIZE say, leaves no empty context for wait_all_device_ops.)
  if (it == map.end()) it = map.emplace(device, std::make_unique<DeviceContext>(device)).first;
  return *it->second;
}

void DeviceContext::register_tensor(TensorImpl* t) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.insert(t);
}

void DeviceContext::unregister_tensor(TensorImpl* t) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(t);
}

size_t DeviceContext::cache_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

void DeviceContext::clear_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  lru_.clear();
  index_.clear();
}

void DeviceContext::add_step_closure(std::function<void()> fn) {
  stream_.enqueue([fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln: step closure failed: %s\n", e.what());
    }
  });
}

void DeviceContext::note_failure(const std::string& error) {
  std::lock_guard<std::mutex> lock(failure_mu_);
  if (failure_.empty()) failure_ = error;
}

std::string DeviceContext::take_failure() {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return std::exchange(failure_, {});
}

void DeviceContext::mark_step() {
  std::vector<std::shared_ptr<TensorImpl>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (TensorImpl* t : live_)
      if (t->node->op != ir::Op::Data) {
        // weak_from_this: an impl being destroyed right now is skipped.
        if (auto sp = t->weak_from_this().lock()) pending.push_back(std::move(sp));
      }
  }
  std::sort(pending.begin(), pending.end(), [](const auto& a, const auto& b) { return a->seq < b->seq; });
  if (!pending.empty()) run(pending, true);
}

void DeviceContext::materialize(const std::vector<std::shared_ptr<TensorImpl>>& tensors) {
  std::vector<std::shared_ptr<TensorImpl>> pending;
  for (const auto& t : tensors)
    if (t->node->op != ir::Op::Data) pending.push_back(t);
  if (!pending.empty()) run(pending, false);
}

// Runs are serial on the stream, so every program shares one arena, as large
// as the largest run so far: a training step and its first-step or
// evaluation variants hold one step's temporaries, not one each. Its size is
// rounded up by a sixteenth (pages never touched cost no memory), so a
// variant a little larger (the first step's graph against the next ones')
// fits; a larger program replaces it, and runs queued with the smaller one
// keep that alive.
std::shared_ptr<Storage> DeviceContext::arena_for(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);  // (steps may be traced on several threads)
  if (!arena_ || arena_->nbytes() < nbytes) {
    const size_t grain = std::max<size_t>(size_t{2} << 20, std::bit_ceil(nbytes) / 16);
    arena_.reset();
    arena_ = std::make_shared<Storage>(device_, (nbytes + grain - 1) / grain * grain);
  }
  return arena_;
}

std::string DeviceContext::compile_reason(const ir::Graph& g, const std::vector<ir::NodePtr>& params) {
  History& h = history_[g.structure_hash()];
  std::string reason;
  if (h.compiles == 0) {
    reason = "first compile of this graph (" + std::to_string(g.nodes.size()) + " nodes, " +
             std::to_string(params.size()) + " inputs)";
  } else {
    for (size_t p = 0; p < params.size() && p < h.shapes.size(); ++p)
      if (params[p]->shape != h.shapes[p]) {
        if (!reason.empty()) reason += "; ";
        std::string name = params[p]->name.empty() ? "#" + std::to_string(p) : params[p]->name;
        reason += "input '" + name + "' changed shape " + to_string(h.shapes[p]) + "→" + to_string(params[p]->shape);
      }
    if (reason.empty()) reason = "same graph structure with different shapes, attributes or donated inputs";
  }
  ++h.compiles;
  h.shapes.clear();
  h.names.clear();
  for (const auto& p : params) {
    h.shapes.push_back(p->shape);
    h.names.push_back(p->name);
  }
  if (h.compiles > 8 && !h.warned) {
    h.warned = true;
    std::fprintf(stderr,
                 "kiln: warning: the same graph structure has been compiled %d times (last: %s); "
                 "pad inputs to a few fixed shapes to avoid recompiling\n",
                 h.compiles, reason.c_str());
  }
  return reason;
}

std::shared_ptr<Executable> DeviceContext::lookup_or_compile(const ir::Graph& g,
                                                             const std::vector<ir::NodePtr>& params) {
  uint64_t key = g.hash();
  std::lock_guard<std::mutex> lock(mu_);
  auto found = index_.find(key);
  if (found != index_.end())
    for (auto it : found->second)
      if (it->graph == g) {
        lru_.splice(lru_.begin(), lru_, it);
        metrics::record_cache_hit();
        return it->exe;
      }
  std::string reason = compile_reason(g, params);
  auto t0 = std::chrono::steady_clock::now();
  auto exe = std::make_shared<Executable>();
  backend::Backend& backend = backend_of(device_);
  const compiler::CompileOptions options = backend.compile_options();
  std::optional<compiler::Program> cached = load_cached_program(g, options);
  const bool from_disk = cached.has_value();
  if (from_disk) {
    exe->program = std::move(*cached);
  } else {
    exe->program = compiler::compile(g, options);
    save_cached_program(g, options, exe->program, seconds_since(t0));
  }
  dump_if_asked(g, exe->program, from_disk);
  exe->plan = backend.prepare(exe->program, device_);
  metrics::record_compile(seconds_since(t0), std::move(reason), static_cast<int64_t>(exe->program.arena_bytes),
                          from_disk);
  lru_.push_front(CacheEntry{g, exe});
  index_[key].push_back(lru_.begin());
  while (lru_.size() > capacity_) {
    auto last = std::prev(lru_.end());
    auto& bucket = index_[last->graph.hash()];
    std::erase(bucket, last);
    lru_.pop_back();
  }
  return exe;
}

void DeviceContext::run(const std::vector<std::shared_ptr<TensorImpl>>& tensors, bool allow_donation) {
  // One output per distinct node; tensors sharing a node share the result.
  std::vector<ir::NodePtr> outputs;
  std::map<const ir::Node*, size_t> out_index;
  for (const auto& t : tensors)
    if (out_index.emplace(t->node.get(), outputs.size()).second) outputs.push_back(t->node);

  std::vector<ir::NodePtr> params;
  ir::Graph g = ir::flatten(outputs, &params);
  for (const auto& p : params)
    KILN_CHECK(!p->data->donated, "input '", p->name.empty() ? std::string("(unnamed)") : p->name, "' ",
               to_string(p->shape), " no longer exists: a later step reused its memory (it is an old value of "
               "a parameter or optimizer state); compute what needs it (e.g. backward()) before that step");
  if (allow_donation) {
    // A parameter no live tensor still holds (an old weight or optimizer
    // moment) may have its memory overwritten by this step.
    std::unordered_set<const ir::Node*> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (TensorImpl* t : live_) held.insert(t->node.get());
    }
    // The buffer itself must be this node's alone (set_data() shares buffers).
    for (size_t p = 0; p < params.size(); ++p)
      g.donated[p] = !held.count(params[p].get()) && params[p]->data.use_count() == 1;
  }
  std::shared_ptr<Executable> exe = lookup_or_compile(g, params);
  const compiler::Program& prog = exe->program;
  std::shared_ptr<Storage> arena = arena_for(prog.arena_bytes);

  auto event = std::make_shared<Event>();
  std::vector<std::shared_ptr<Buffer>> in_buffers;
  for (const auto& p : params) in_buffers.push_back(p->data);
  std::vector<std::shared_ptr<Storage>> out_storage(outputs.size());
  for (size_t o = 0; o < outputs.size(); ++o) {
    int32_t donor = prog.output_donor[o];
    if (donor >= 0) in_buffers[donor]->donated = true;
    out_storage[o] = donor >= 0 ? in_buffers[donor]->storage
                                : std::make_shared<Storage>(device_, prog.output_nbytes[o]);
  }
  // The task lets go of its inputs before signalling: a host thread woken by
  // the event must see them unshared, or donation (which checks that a buffer
  // has no other holder) would depend on thread timing, and so would the graph
  // hash that records it.
  const Device device = device_;
  stream_.enqueue([this, exe, arena, in_buffers, out_storage, event, device]() mutable {
    auto finish = [&](std::string error) {
      in_buffers.clear();
      out_storage.clear();
      event->signal(std::move(error));
    };
    for (size_t p = 0; p < in_buffers.size(); ++p) {
      const auto ready = in_buffers[p]->ready;
      if (!ready) continue;
      ready->wait();
      if (!ready->error().empty()) {
        metrics::record_execution(0, true);  // before signalling: readers may look at metrics
        // The first failure's message, unchanged: wrapping it again in every
        // step that follows would grow it with each step.
        finish(ready->error());
        return;
      }
    }
    std::vector<void*> ins, outs;
    for (const auto& b : in_buffers) ins.push_back(b->storage->data());
    for (const auto& s : out_storage) outs.push_back(s->data());
    auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
      backend_of(device).execute(exe->program, *exe->plan, device, ins, outs, arena ? arena->data() : nullptr);
    } catch (const std::exception& e) {
      error = e.what();
      note_failure(error);
      // The other replicas would wait for this one in their next all-reduce.
      int64_t group = dist::group_of(device);
      if (group >= 0) dist::abort_group(group, "a step on " + device.str() + " failed: " + error);
    }
    metrics::record_execution(seconds_since(t0), !error.empty());
    finish(std::move(error));
  });

  for (const auto& t : tensors) {
    size_t o = out_index.at(t->node.get());
    auto buffer = std::make_shared<Buffer>(Buffer{out_storage[o], event});
    ir::NodePtr data = ir::data(std::move(buffer), t->node->shape, t->node->dtype, device_, t->name);
    if (t->leaf_requires_grad) {
      data->requires_grad = true;
      data->grad_owner = t->weak_from_this();
    } else if (t->node->requires_grad) {
      // Keep the expression so backward() still works (it recomputes what
      // the gradient needs; values a later step overwrote are reported).
      data->requires_grad = true;
      data->grad_source = t->node;
    }
    t->node = std::move(data);
  }
}

}  // namespace kiln::runtime

namespace kiln {

namespace {
std::atomic<int> g_eager{-1};  // read by every Tensor constructor, on any thread
}

void mark_step(Device device) { runtime::DeviceContext::get(device).mark_step(); }

void wait_device_ops(Device device) { runtime::DeviceContext::get(device).stream().synchronize(); }

void wait_all_device_ops() {
  std::vector<runtime::DeviceContext*> in_use;
  {
    std::lock_guard<std::mutex> lock(runtime::g_contexts_mu);
    for (auto& [device, ctx] : runtime::contexts().map) in_use.push_back(ctx.get());
  }
  for (runtime::DeviceContext* ctx : in_use) ctx->stream().synchronize();
}

std::string take_step_failure(Device device) { return runtime::DeviceContext::get(device).take_failure(); }

void add_step_closure(std::function<void()> fn, Device device) {
  runtime::DeviceContext::get(device).add_step_closure(std::move(fn));
}

void set_allow_tf32(bool on) {
  for (backend::Backend* b : backend::built_backends()) b->set_allow_tf32(on);
}

bool eager_mode() {
  int v = g_eager.load(std::memory_order_relaxed);
  if (v < 0) {
    v = env_switch("KILN_EAGER") ? 1 : 0;
    g_eager.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

void set_eager_mode(bool on) { g_eager = on ? 1 : 0; }

}  // namespace kiln

namespace kiln {
bool runtime_shutting_down() {
  std::lock_guard<std::mutex> lock(runtime::g_contexts_mu);
  return runtime::g_shutdown;
}
}  // namespace kiln
