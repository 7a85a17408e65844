// The host memory cache: large blocks come back for the next request of the
// same size, up to a limit; small ones are not kept.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>

#include "kiln/core/buffer.h"
#include "kiln/core/host_memory.h"

namespace kiln {
namespace {

namespace hm = host_memory;

// Sets a limit on an empty cache, and empties it again after the test (the
// cache is process-wide).
struct CacheLimit {
  explicit CacheLimit(size_t bytes) {
    hm::empty_cache();
    hm::set_cache_limit(bytes);
  }
  ~CacheLimit() {
    hm::empty_cache();
    hm::set_cache_limit(size_t(64) << 20);
  }
};

TEST(HostMemory, AFreedLargeBlockServesTheNextRequestOfItsSize) {
  CacheLimit limit(size_t(64) << 20);
  const size_t n = 3 * hm::kCachedBlock + 100;  // rounded up to whole pages
  void* a = hm::allocate(n);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 4096, 0u);
  std::memset(a, 1, n);
  hm::release(a, n);
  EXPECT_EQ(hm::stats().cached_bytes, (n + 4095) / 4096 * 4096);
  const auto before = hm::stats();
  void* b = hm::allocate(n);
  EXPECT_EQ(b, a);
  EXPECT_EQ(hm::stats().reused, before.reused + 1);
  EXPECT_EQ(hm::stats().cached_bytes, 0u);
  // Another size takes fresh memory.
  void* c = hm::allocate(2 * hm::kCachedBlock);
  EXPECT_NE(c, b);
  EXPECT_EQ(hm::stats().fresh, before.fresh + 1);
  hm::release(b, n);
  hm::release(c, 2 * hm::kCachedBlock);
}

// Blocks from 2 MiB start on a 2 MiB boundary (where huge pages can back
// them); smaller large blocks only on a page. Neither is rounded up.
TEST(HostMemory, BlocksFromTwoMebibytesAreAlignedForHugePages) {
  const char* env = std::getenv("KILN_HUGE_PAGES");
  if (env && (std::string(env) == "0" || std::string(env) == "off")) GTEST_SKIP() << "KILN_HUGE_PAGES is off";
  CacheLimit limit(0);
  for (size_t n : {hm::kHugeBlock, hm::kHugeBlock + 4096 * 90 + 7, 5 * hm::kHugeBlock}) {
    void* a = hm::allocate(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % hm::kHugeBlock, 0u) << n;
    std::memset(a, 1, n);  // every byte is usable
    hm::release(a, n);
  }
  void* b = hm::allocate(hm::kHugeBlock - 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 4096, 0u);
  hm::release(b, hm::kHugeBlock - 4096);
}

TEST(HostMemory, SmallBlocksAreNotKept) {
  CacheLimit limit(size_t(64) << 20);
  void* a = hm::allocate(1000);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  hm::release(a, 1000);
  EXPECT_EQ(hm::stats().cached_bytes, 0u);
}

TEST(HostMemory, TheLimitFreesTheOldestBlocks) {
  const size_t block = 2 * hm::kCachedBlock;
  CacheLimit limit(3 * block);
  void* p[4];
  for (auto& x : p) x = hm::allocate(block);
  for (auto& x : p) hm::release(x, block);
  EXPECT_EQ(hm::stats().cached_bytes, 3 * block);  // the first one was freed
  hm::set_cache_limit(block);
  EXPECT_EQ(hm::stats().cached_bytes, block);
  EXPECT_EQ(hm::allocate(block), p[3]);  // the newest stayed
  hm::release(p[3], block);
  hm::set_cache_limit(0);  // off: nothing is kept
  EXPECT_EQ(hm::stats().cached_bytes, 0u);
  void* q = hm::allocate(block);
  hm::release(q, block);
  EXPECT_EQ(hm::stats().cached_bytes, 0u);
}

// Sizes that never come back do not pile up: a request that finds no block of
// its size frees at least as many bytes of the oldest blocks.
TEST(HostMemory, ARequestOfANewSizeFreesTheOldestBlocks) {
  CacheLimit limit(size_t(64) << 20);
  const size_t a = 2 * hm::kCachedBlock, b = 3 * hm::kCachedBlock, c = hm::kCachedBlock;
  void* pa = hm::allocate(a);
  void* pb = hm::allocate(b);
  hm::release(pa, a);
  hm::release(pb, b);
  EXPECT_EQ(hm::stats().cached_bytes, a + b);
  void* pc = hm::allocate(c);  // a miss: frees `a`, the oldest, which covers c
  EXPECT_EQ(hm::stats().cached_bytes, b);
  void* pd = hm::allocate(4 * hm::kCachedBlock);  // frees `b` too
  EXPECT_EQ(hm::stats().cached_bytes, 0u);
  hm::release(pc, c);
  hm::release(pd, 4 * hm::kCachedBlock);
}

TEST(HostMemory, CpuStoragesUseTheCache) {
  CacheLimit limit(size_t(64) << 20);
  const size_t n = 5 * hm::kCachedBlock;
  void* first;
  {
    Storage s(Device::cpu(), n);
    first = s.data();
  }
  EXPECT_EQ(hm::stats().cached_bytes, n);
  Storage again(Device::cpu(), n);
  EXPECT_EQ(again.data(), first);
}

}  // namespace
}  // namespace kiln
