#pragma once
// The caching allocator's logic, independent of CUDA (the tests drive it
// with malloc): blocks are rounded up to size classes and, once released,
// kept in a free list per class for the next request of that class, so a
// training loop's steady state makes no cudaMalloc/cudaFree calls (each of
// which synchronises the device).
//
// Stream ordering: a block is released only when no queued kernel can still
// use it (every step waits for its stream before it lets go of its buffers;
// host<->device copies are synchronous), so reuse needs no events.
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::backend::cuda {

class BlockPool {
 public:
  // allocate returns nullptr when the device is out of memory.
  using Allocate = std::function<void*(size_t)>;
  using Release = std::function<void(void*)>;
  BlockPool(std::string name, Allocate allocate, Release release);
  ~BlockPool();  // returns the cached blocks (blocks still in use are the holders')
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // The size class of a request: at least 512 bytes; powers of two up to
  // 1 MiB; above, multiples of an eighth of the power of two below (at most
  // 12.5 % rounding).
  static size_t size_class(size_t nbytes);

  // A block of at least nbytes: from the free list of its class, else new;
  // when the source is out of memory, the cache is returned and the request
  // retried once. Throws kiln::Error naming the pool and its state.
  void* allocate(size_t nbytes);
  // nbytes as passed to allocate().
  void release(void* ptr, size_t nbytes);
  // Returns every cached block to the source.
  void trim();

  struct Stats {
    size_t in_use = 0, cached = 0, reserved = 0, peak_in_use = 0;
    size_t allocations = 0, reuses = 0;  // allocate() calls; those served from a free list
  };
  Stats stats() const;

 private:
  void trim_locked();
  std::string name_;
  Allocate allocate_;
  Release release_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // size class -> blocks
  Stats stats_;
};

}  // namespace kiln::backend::cuda
