#pragma once
// Host memory for CPU storages. Large blocks (a step's gradients and other
// outputs, ~100 MB each for an embedding table) are kept when freed and handed
// out again for the next request of the same size: a training loop asks for the
// same sizes every step, and fresh pages cost a page fault and the kernel's
// zeroing each (bert-base 8x128: ~0.5 s a step when every step's gradients
// arrive in new memory). Small blocks go straight to malloc.
#include <cstddef>
#include <cstdint>

namespace kiln::host_memory {

// The machine's physical memory in bytes (0 when the system does not say).
size_t physical_bytes();

// Blocks of at least this many bytes are page-aligned and cached.
constexpr size_t kCachedBlock = size_t(1) << 20;
// Fresh blocks of at least this many bytes are aligned to it and advised to
// use transparent huge pages (KILN_HUGE_PAGES=0 turns that off).
constexpr size_t kHugeBlock = size_t(2) << 20;

// 64-byte aligned memory of at least nbytes (page-aligned from kCachedBlock,
// 2 MiB-aligned from kHugeBlock). Throws std::bad_alloc when the system has
// none, and kiln::Error (at the first large request) when KILN_HOST_CACHE_MB
// or KILN_HUGE_PAGES is malformed.
void* allocate(size_t nbytes);
// Returns memory from allocate(nbytes) (the same nbytes).
void release(void* ptr, size_t nbytes) noexcept;

struct Stats {
  size_t cached_bytes = 0;  // freed blocks held for reuse
  size_t limit_bytes = 0;
  int64_t reused = 0;       // large allocations served from the cache
  int64_t fresh = 0;        // large allocations that took new memory
};
Stats stats();

// The most bytes kept (default: min(2 GiB, physical memory / 8); the
// environment's KILN_HOST_CACHE_MB overrides it, 0 turns caching off).
// Lowering it frees the oldest blocks over the new limit. A request that
// finds no block of its size also frees at least its size of the oldest.
void set_cache_limit(size_t bytes);
// Frees every cached block (memory the process no longer uses goes back).
void empty_cache();

}  // namespace kiln::host_memory
