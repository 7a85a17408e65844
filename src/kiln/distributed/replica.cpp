// Replica groups: spawn(), rendezvous(), and the collectives' shared-memory
// half. A Group is the replicas of one spawn() in this process; they meet at
// barriers that an abort (a failed replica) or the ddp_timeout (a replica
// that does not come) breaks with an error.
#include "kiln/distributed/replica.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/distributed/collectives.h"
#include "kiln/distributed/mpi.h"
#include "kiln/distributed/threads.h"
#include "kiln/distributed/timeout.h"

namespace kiln::dist {

namespace {

// A barrier for n threads that an abort breaks: waiters (and later comers)
// throw an error carrying the reason. A waiter gives up after the ddp_timeout
// (times `patience`) and gets the members that had not arrived.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n), here_(n, false) {}

  // Empty when every member arrived; the late members' indices on a timeout.
  std::vector<int> wait(int member, int patience = 1) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) throw Error(why_);
    const uint64_t gen = generation_;
    here_[member] = true;
    if (++arrived_ == n_) {
      arrived_ = 0;
      std::fill(here_.begin(), here_.end(), false);
      ++generation_;
      cv_.notify_all();
      return {};
    }
    Deadline deadline(patience);
    while (!cv_.wait_until(lock, deadline.next_check(), [&] { return generation_ != gen || aborted_; })) {
      if (!deadline.passed()) continue;
      std::vector<int> late;
      for (int r = 0; r < n_; ++r)
        if (!here_[r]) late.push_back(r);
      return late;
    }
    if (generation_ == gen) throw Error(why_);
    return {};
  }

  void abort(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    why_ = why;
    cv_.notify_all();
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::vector<bool> here_;  // who has arrived in this generation
  uint64_t generation_ = 0;
  bool aborted_ = false;
  std::string why_;
};

// One replica's collectives, run in the order they were submitted on a
// thread of their own, so a step's computation goes on while they run.
class Worker {
 public:
  Worker() : thread_([this] { loop(); }) {}
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  std::shared_future<void> submit(std::function<void()> task) {
    std::packaged_task<void()> job(std::move(task));
    std::shared_future<void> done = job.get_future().share();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(job));
    }
    cv_.notify_all();
    return done;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::packaged_task<void()> job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      job();  // an exception lands in the future
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

// The replicas of one spawn(). Their stream threads meet in all-reduces and
// their host threads in rendezvous and host sums, at separate barriers: a
// replica's host may be at a rendezvous while its stream is in a step.
class Group {
 public:
  Group(int64_t id, int n)
      : id(id), n(n), process_rank(mpi::rank()), device(n), host(n), posts(n), values(n), tags(n), tag_names(n) {
    for (int r = 0; r < n; ++r) workers.push_back(std::make_unique<Worker>());
  }

  // Meets the others at `b` as `replica`, inside `what` ("an all-reduce",
  // "rendezvous 'save'"). After the ddp_timeout (times `patience`, longer
  // where the others wait on replica 0's MPI call, so that MPI's timeout,
  // which names the process, goes first) the group is aborted with an error
  // that names the replicas that did not arrive.
  void wait(Barrier& b, int replica, std::string_view what, int patience = 1) {
    const std::vector<int> late = b.wait(replica, patience);
    if (late.empty()) return;
    std::vector<int> global;
    for (int r : late) global.push_back(process_rank * n + r);
    const char* s = late.size() == 1 ? "" : "s";
    const std::string why = "ddp_timeout: replica" + std::string(s) + " " + rank_list(late) + " (global rank" + s +
                            " " + rank_list(global) + ") did not reach " + std::string(what) + " within " +
                            timeout_text();
    abort(why);
    throw Error(why);
  }

  void abort(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      why_ = why;
    }
    device.abort(why);
    host.abort(why);
  }
  bool aborted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  std::string why() const {
    std::lock_guard<std::mutex> lock(mu_);
    return why_;
  }

  const int64_t id;
  const int n;
  const int process_rank;
  Barrier device, host;
  // A collective's buffer (the replica's inputs, then its result).
  struct Post {
    std::span<const int64_t> sizes;
    float* out = nullptr;
  };
  std::vector<Post> posts;         // all_reduce: what each replica contributes
  std::vector<double> values;      // all_reduce_host
  double shared_value = 0;
  std::vector<uint64_t> tags;      // rendezvous
  std::vector<std::string> tag_names;
  std::string rendezvous_error;
  std::vector<std::unique_ptr<Worker>> workers;  // one per replica

 private:
  mutable std::mutex mu_;
  bool aborted_ = false;
  std::string why_;
};

std::mutex g_registry_mu;
std::map<int64_t, std::shared_ptr<Group>> g_groups;
std::map<Device, std::pair<int64_t, int>> g_devices;  // device -> (group, threads)
int64_t g_next_group = 1;

std::shared_ptr<Group> find_group(int64_t id) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_groups.find(id);
  return it == g_groups.end() ? nullptr : it->second;
}

std::shared_ptr<Group> new_group(int n, int threads_each) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  for (int i = 0; i < n; ++i)
    KILN_CHECK(!g_devices.count(Device::cpu(i)), "spawn: device cpu:", i,
               " already runs a replica of another spawn() in this process");
  auto g = std::make_shared<Group>(g_next_group++, n);
  g_groups[g->id] = g;
  for (int i = 0; i < n; ++i) g_devices[Device::cpu(i)] = {g->id, threads_each};
  return g;
}

void drop_group(int64_t id) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  g_groups.erase(id);
  std::erase_if(g_devices, [&](const auto& kv) { return kv.second.first == id; });
}

// The lone replica of a process outside spawn(): group 0, one member.
const ReplicaInfo& lone_replica() {
  static const ReplicaInfo info = [] {
    mpi::init();
    std::lock_guard<std::mutex> lock(g_registry_mu);
    g_groups[0] = std::make_shared<Group>(0, 1);
    ReplicaInfo r;
    r.process_rank = mpi::rank();
    r.process_count = mpi::size();
    r.group = 0;
    return r;
  }();
  return info;
}

thread_local const ReplicaInfo* t_replica = nullptr;

std::shared_ptr<Group> my_group() {
  const ReplicaInfo& r = this_replica();
  auto g = find_group(r.group);
  KILN_ASSERT(g);
  return g;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::atomic<int64_t> g_count{0}, g_bytes{0}, g_overlapped{0};
std::atomic<double> g_seconds{0};

// Counts one collective of `total` floats that began at t0.
void record(std::chrono::steady_clock::time_point t0, int64_t total) {
  ++g_count;
  g_bytes += total * static_cast<int64_t>(sizeof(float));
  double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double cur = g_seconds.load();
  while (!g_seconds.compare_exchange_weak(cur, cur + dt)) {
  }
}

}  // namespace

int default_threads() {
  static const int n = [] {
    if (std::getenv("OMP_NUM_THREADS")) return std::max(1, omp_get_max_threads());
    int procs = omp_get_num_procs();
    // Processes of one mpirun on this host share its cores.
    if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
      return std::max(1, procs / std::max(1, std::atoi(local)));
    return std::max(1, procs);
  }();
  return n;
}

int threads_for(Device device) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_devices.find(device);
  return it == g_devices.end() ? default_threads() : it->second.second;
}

int64_t group_of(Device device) {
  std::lock_guard<std::mutex> lock(g_registry_mu);
  auto it = g_devices.find(device);
  return it == g_devices.end() ? -1 : it->second.first;
}

void abort_group(int64_t group, const std::string& why) {
  if (auto g = find_group(group)) g->abort(why);
}

void throw_if_aborted() {
  auto g = my_group();
  if (g->aborted()) throw Error(g->why());
}

Stats stats() { return Stats{g_count.load(), g_bytes.load(), g_seconds.load(), g_overlapped.load()}; }
void record_overlap(int64_t kernels) { g_overlapped += kernels; }
void reset_stats() {
  g_overlapped = 0;
  g_count = 0;
  g_bytes = 0;
  g_seconds = 0;
}

std::shared_future<void> submit(int64_t group, int replica, std::function<void()> task) {
  auto g = find_group(group);
  KILN_CHECK(g, "collective: replica group ", group, " no longer exists (its spawn() has returned)");
  KILN_ASSERT(replica >= 0 && replica < g->n);
  return g->workers[replica]->submit(std::move(task));
}

void all_reduce_in_place(int64_t group, int replica, float* buf, int64_t total, double scale) {
  auto t0 = std::chrono::steady_clock::now();
  auto g = find_group(group);
  KILN_CHECK(g, "all-reduce: replica group ", group, " no longer exists (its spawn() has returned)");
  const int n = g->n;
  const bool across = mpi::size() > 1;
  const float fscale = static_cast<float>(scale);
  const int64_t size_of[1] = {total};
  g->posts[replica] = Group::Post{std::span<const int64_t>(size_of, 1), buf};
  g->wait(g->device, replica, "an all-reduce");
  for (int r = 0; r < n; ++r)
    KILN_CHECK(g->posts[r].sizes[0] == total, "all-reduce: replica ", r, " contributes ", g->posts[r].sizes[0],
               " elements, replica ", replica, " ", total, " (the replicas traced different steps)");
  // This replica sums elements [lo, hi) of every buffer, in replica order,
  // and is the only one to touch them until the next barrier.
  const int64_t lo = total * replica / n, hi = total * (replica + 1) / n, len = hi - lo;
  std::vector<float> acc(g->posts[0].out + lo, g->posts[0].out + hi);
  for (int r = 1; r < n; ++r) {
    const float* src = g->posts[r].out + lo;
    for (int64_t j = 0; j < len; ++j) acc[j] += src[j];
  }
  if (!across) {
    if (fscale != 1.0f)
      for (float& v : acc) v *= fscale;
    for (int r = 0; r < n; ++r) std::copy(acc.begin(), acc.end(), g->posts[r].out + lo);
  } else {
    std::copy(acc.begin(), acc.end(), g->posts[0].out + lo);
    g->wait(g->device, replica, "an all-reduce");
    if (replica == 0) {
      try {
        mpi::all_reduce_device(buf, total);
      } catch (const std::exception& e) {
        g->abort(e.what());
        throw;
      }
      if (fscale != 1.0f)
        for (int64_t j = 0; j < total; ++j) buf[j] *= fscale;
    }
    g->wait(g->device, replica, "an all-reduce", 2);
    if (replica != 0) std::memcpy(buf, g->posts[0].out, total * sizeof(float));
  }
  g->wait(g->device, replica, "an all-reduce");
  if (replica == 0) record(t0, total);
}

void broadcast_in_place(int64_t group, int replica, float* buf, std::span<const int64_t> sizes,
                        std::span<const int64_t> roots) {
  auto t0 = std::chrono::steady_clock::now();
  auto g = find_group(group);
  KILN_CHECK(g, "broadcast: replica group ", group, " no longer exists (its spawn() has returned)");
  const int n = g->n, process = mpi::rank();
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  g->posts[replica] = Group::Post{sizes, buf};
  g->wait(g->device, replica, "a broadcast");
  for (int r = 0; r < n; ++r)
    KILN_CHECK(g->posts[r].sizes.size() == sizes.size() &&
                   std::equal(sizes.begin(), sizes.end(), g->posts[r].sizes.begin()),
               "broadcast: replica ", r, " sends different tensors than replica ", replica,
               " (the replicas traced different steps)");
  if (mpi::size() == 1) {
    // A root's own segment is never written, so copies cannot collide.
    int64_t at = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (roots[k] != replica) std::memcpy(buf + at, g->posts[roots[k]].out + at, sizes[k] * sizeof(float));
      at += sizes[k];
    }
    g->wait(g->device, replica, "a broadcast");
  } else {
    if (replica == 0) {
      // Replica 0 sends this process's segments, from whichever replica owns
      // each, and receives the others' in one MPI call.
      std::vector<int> root_processes(sizes.size());
      int64_t at = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        const int root_process = static_cast<int>(roots[k] / n), root_local = static_cast<int>(roots[k] % n);
        if (root_process == process && root_local != 0)
          std::memcpy(buf + at, g->posts[root_local].out + at, sizes[k] * sizeof(float));
        root_processes[k] = root_process;
        at += sizes[k];
      }
      try {
        mpi::broadcast_device(buf, sizes, root_processes);
      } catch (const std::exception& e) {
        g->abort(e.what());
        throw;
      }
    }
    g->wait(g->device, replica, "a broadcast", 2);
    if (replica != 0) std::memcpy(buf, g->posts[0].out, total * sizeof(float));
    g->wait(g->device, replica, "a broadcast");
  }
  if (replica == 0) record(t0, total);
}

double all_reduce_host(double value) {
  const ReplicaInfo& me = this_replica();
  auto g = my_group();
  g->values[me.local_index] = value;
  g->wait(g->host, me.local_index, "a host all-reduce");
  double sum = 0;
  for (double v : g->values) sum += v;
  if (me.process_count > 1) {
    g->wait(g->host, me.local_index, "a host all-reduce");  // everyone has read values
    if (me.local_index == 0) {
      try {
        mpi::all_reduce_host(&sum, 1);
      } catch (const std::exception& e) {
        g->abort(e.what());
        throw;
      }
      g->shared_value = sum;
    }
    g->wait(g->host, me.local_index, "a host all-reduce", 2);
    sum = g->shared_value;
  }
  g->wait(g->host, me.local_index, "a host all-reduce");  // values and shared_value may be reused after this
  return sum;
}

}  // namespace kiln::dist

namespace kiln {

const ReplicaInfo& this_replica() { return dist::t_replica ? *dist::t_replica : dist::lone_replica(); }

void spawn(const std::function<void(int)>& fn, int n) {
  KILN_CHECK(n >= 1, "spawn: the number of replicas must be at least 1, got ", n);
  dist::mpi::init();
  const int threads_each = n == 1 ? dist::default_threads() : std::max(1, dist::default_threads() / n);
  if (n > dist::default_threads())  // each still runs one thread: more threads than cores
    std::fprintf(stderr,
                 "kiln: warning: %d replicas share %d cores (one thread each): the cores are oversubscribed; "
                 "%d replicas or fewer avoid it\n",
                 n, dist::default_threads(), dist::default_threads());
  // Each replica runs two threads (its host thread and its stream's worker).
  auto no_threads = [n](const std::string& which, const std::system_error& e) {
    return Error("spawn: could not start " + which + " of " + std::to_string(n) + " replicas (" + e.what() +
                 "): ask for fewer (kiln train's --num_replicas)");
  };
  std::shared_ptr<dist::Group> g;
  try {
    g = dist::new_group(n, threads_each);
  } catch (const std::system_error& e) {
    throw no_threads("the stream threads", e);
  }
  std::vector<std::exception_ptr> errors(n);
  std::atomic<int> origin{-1};
  auto body = [&](int i) {
    ReplicaInfo info;
    info.local_index = i;
    info.local_count = n;
    info.process_rank = dist::mpi::rank();
    info.process_count = dist::mpi::size();
    info.device = Device::cpu(i);
    info.group = g->id;
    dist::t_replica = &info;
    omp_set_num_threads(threads_each);
    try {
      fn(i);
    } catch (const std::exception& e) {
      errors[i] = std::current_exception();
      int expected = -1;
      origin.compare_exchange_strong(expected, i);
      g->abort("replica " + std::to_string(info.global_rank()) + " failed: " + e.what());
    } catch (...) {
      errors[i] = std::current_exception();
      int expected = -1;
      origin.compare_exchange_strong(expected, i);
      g->abort("replica " + std::to_string(info.global_rank()) + " failed");
    }
    dist::t_replica = nullptr;
  };
  if (n == 1) {
    body(0);
  } else {
    std::vector<std::thread> threads;
    try {
      for (int i = 0; i < n; ++i) threads.emplace_back(body, i);
    } catch (const std::system_error& e) {
      const Error error = no_threads("replica " + std::to_string(threads.size()), e);
      g->abort(error.what());  // the replicas started wait for the others: they stop
      for (auto& t : threads) t.join();
      dist::drop_group(g->id);
      throw error;
    }
    for (auto& t : threads) t.join();
  }
  dist::drop_group(g->id);
  if (origin >= 0) std::rethrow_exception(errors[origin]);
}

void rendezvous(const std::string& tag) {
  const ReplicaInfo& me = this_replica();
  auto g = dist::my_group();
  const uint64_t h = dist::fnv1a(tag);
  const std::string what = "rendezvous '" + tag + "'";
  g->tags[me.local_index] = h;
  g->tag_names[me.local_index] = tag;
  g->wait(g->host, me.local_index, what);
  for (int r = 0; r < g->n; ++r)
    KILN_CHECK(g->tags[r] == h, "rendezvous: replica ", me.process_rank * g->n + r, " reached '", g->tag_names[r],
               "' while replica ", me.global_rank(), " reached '", tag, "'");
  if (me.process_count > 1) {
    g->wait(g->host, me.local_index, what);
    if (me.local_index == 0) {
      g->rendezvous_error.clear();
      try {
        uint64_t lo = 0, hi = 0;
        dist::mpi::min_max_host(h, &lo, &hi, what);
        if (lo != hi)
          g->rendezvous_error = "rendezvous: MPI processes reached different rendezvous (process " +
                                std::to_string(me.process_rank) + " is at '" + tag + "')";
      } catch (const std::exception& e) {
        g->abort(e.what());
        throw;
      }
    }
    g->wait(g->host, me.local_index, what, 2);
    KILN_CHECK(g->rendezvous_error.empty(), g->rendezvous_error);
  }
  g->wait(g->host, me.local_index, what);
}

}  // namespace kiln
