#include "kiln/backend/cuda/pool.h"

#include <algorithm>
#include <bit>

#include "kiln/core/error.h"

namespace kiln::backend::cuda {

BlockPool::BlockPool(std::string name, Allocate allocate, Release release)
    : name_(std::move(name)), allocate_(std::move(allocate)), release_(std::move(release)) {}

BlockPool::~BlockPool() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

size_t BlockPool::size_class(size_t nbytes) {
  constexpr size_t kMin = 512, kSmall = size_t{1} << 20;
  if (nbytes <= kMin) return kMin;
  if (nbytes <= kSmall) return std::bit_ceil(nbytes);
  const size_t step = std::bit_floor(nbytes) / 8;
  return (nbytes + step - 1) / step * step;
}

void* BlockPool::allocate(size_t nbytes) {
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.allocations;
  void* p = nullptr;
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    stats_.cached -= size;
    ++stats_.reuses;
  } else {
    p = allocate_(size);
    if (!p && stats_.cached) {  // out of memory: give the cache back, once
      trim_locked();
      p = allocate_(size);
    }
    KILN_CHECK(p != nullptr, name_, ": out of memory allocating ", nbytes, " bytes (", stats_.in_use,
               " bytes in use, ", stats_.reserved, " reserved)");
    stats_.reserved += size;
  }
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  return p;
}

void BlockPool::release(void* ptr, size_t nbytes) {
  if (!ptr) return;
  const size_t size = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mu_);
  free_[size].push_back(ptr);
  stats_.in_use -= size;
  stats_.cached += size;
}

void BlockPool::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  trim_locked();
}

void BlockPool::trim_locked() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) release_(p);
    stats_.reserved -= size * blocks.size();
    stats_.cached -= size * blocks.size();
    blocks.clear();
  }
}

BlockPool::Stats BlockPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace kiln::backend::cuda
