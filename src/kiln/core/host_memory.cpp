#include "kiln/core/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <list>
#include <mutex>
#include <new>
#include <string>

#include "kiln/core/env.h"
#include "kiln/core/error.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/asan_interface.h>
#define KILN_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define KILN_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define KILN_POISON(p, n) ((void)(p), (void)(n))
#define KILN_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace kiln::host_memory {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = kHugeBlock;

size_t default_limit() {
  if (!env_value("KILN_HOST_CACHE_MB").empty()) {
    const int64_t mb = env_integer("KILN_HOST_CACHE_MB", 0);
    KILN_CHECK(static_cast<uint64_t>(mb) <= (SIZE_MAX >> 20), "KILN_HOST_CACHE_MB: ", mb, " megabytes is too many");
    return static_cast<size_t>(mb) << 20;
  }
  return std::min<size_t>(size_t(2) << 30, physical_bytes() / 8);
}

// Freed large blocks, oldest first; a request takes the newest block of its
// size (the one most likely still in cache). A few hundred blocks at most, so
// a list is enough. A request that finds no block of its size frees at least
// as many bytes of the oldest blocks: sizes that never come back (a growing
// key/value cache, changing sequence lengths) cannot pile up, and the cache
// grows only while sizes repeat. Under AddressSanitizer kept blocks are
// poisoned, so a use after free is still reported.
class Cache {
 public:
  void* take(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!limit_set_) set_limit_locked(default_limit());
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it)
      if (it->bytes == bytes) {
        void* p = it->ptr;
        cached_ -= bytes;
        blocks_.erase(std::next(it).base());
        ++reused_;
        KILN_UNPOISON(p, bytes);
        return p;
      }
    ++fresh_;
    size_t freed = 0;
    while (freed < bytes && !blocks_.empty()) freed += free_oldest_locked();
    return nullptr;
  }

  // False when the block is not kept (the caller frees it).
  bool keep(void* p, size_t bytes) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes > limit_) return false;
    try {
      blocks_.push_back({p, bytes});
    } catch (const std::bad_alloc&) {
      return false;
    }
    KILN_POISON(p, bytes);
    cached_ += bytes;
    trim_locked();
    return true;
  }

  void set_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    set_limit_locked(bytes);
  }

  void empty() {
    std::lock_guard<std::mutex> lock(mu_);
    while (!blocks_.empty()) free_oldest_locked();
  }

  Stats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!limit_set_) set_limit_locked(default_limit());
    return Stats{cached_, limit_, reused_, fresh_};
  }

 private:
  struct Block {
    void* ptr;
    size_t bytes;
  };
  void set_limit_locked(size_t bytes) {
    limit_ = bytes;
    limit_set_ = true;
    trim_locked();
  }
  void trim_locked() {
    while (cached_ > limit_ && !blocks_.empty()) free_oldest_locked();
  }
  size_t free_oldest_locked() {
    const Block b = blocks_.front();
    blocks_.pop_front();
    cached_ -= b.bytes;
    KILN_UNPOISON(b.ptr, b.bytes);
    std::free(b.ptr);
    return b.bytes;
  }

  std::mutex mu_;
  std::list<Block> blocks_;
  size_t cached_ = 0, limit_ = 0;
  bool limit_set_ = false;
  int64_t reused_ = 0, fresh_ = 0;
};

// Never destroyed: storages may be freed during static destruction.
Cache& cache() {
  static Cache* c = new Cache;
  return *c;
}

size_t block_bytes(size_t nbytes) { return (nbytes + kPage - 1) / kPage * kPage; }

// Blocks of 2 MiB and more start on a 2 MiB boundary and ask the kernel for
// transparent huge pages (where it is set to "madvise", Debian's default): a
// step streams gigabytes through parameters, gradients and optimizer state,
// and 4 KiB pages make that a TLB miss every 4 KiB. The tail past the last
// whole 2 MiB stays in small pages, so no memory is added.
void* fresh_block(size_t bytes) {
  static const bool huge = env_switch("KILN_HUGE_PAGES");  // on unless 0 or off
  if (bytes < kHugePage || !huge) return std::aligned_alloc(kPage, bytes);
  // (posix_memalign: aligned_alloc wants a size that is a multiple of the
  // alignment, and rounding up would add up to 2 MiB a block.)
  void* p = nullptr;
  if (::posix_memalign(&p, kHugePage, bytes) != 0) return nullptr;
  ::madvise(p, bytes, MADV_HUGEPAGE);  // advice: a kernel without THP just says no
  return p;
}

}  // namespace

size_t physical_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
}

void* allocate(size_t nbytes) {
  if (nbytes < kCachedBlock) {
    void* p = std::aligned_alloc(64, (std::max<size_t>(nbytes, 1) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  if (nbytes > SIZE_MAX - kPage) throw std::bad_alloc();
  const size_t bytes = block_bytes(nbytes);
  if (void* p = cache().take(bytes)) return p;
  void* p = fresh_block(bytes);
  if (!p) {  // what is cached may be what the system lacks
    cache().empty();
    p = fresh_block(bytes);
  }
  if (!p) throw std::bad_alloc();
  return p;
}

void release(void* ptr, size_t nbytes) noexcept {
  if (!ptr) return;
  if (nbytes < kCachedBlock || !cache().keep(ptr, block_bytes(nbytes))) std::free(ptr);
}

Stats stats() { return cache().stats(); }
void set_cache_limit(size_t bytes) { cache().set_limit(bytes); }
void empty_cache() { cache().empty(); }

}  // namespace kiln::host_memory
