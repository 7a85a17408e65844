#include "kiln/data/loader.h"

#include <algorithm>
#include <numeric>
#include <system_error>
#include <utility>

#include "kiln/core/error.h"

namespace kiln::data {

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  if (!shuffle) return p;
  // Fisher-Yates; j uniform in [0, i] by multiply-shift of a 64-bit hash
  // (bias below n / 2^64).
  for (int64_t i = n - 1; i > 0; --i) {
    uint64_t h = mix_seed(seed ^ 0x7368756666ull, static_cast<uint64_t>(epoch), static_cast<uint64_t>(i));
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(h) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p;
}

std::vector<int64_t> length_grouped(std::vector<int64_t> order, const std::vector<int64_t>& lengths,
                                    int64_t batch_size) {
  KILN_CHECK(batch_size > 0, "length_grouped: batch_size must be positive, got ", batch_size);
  const auto n = static_cast<int64_t>(order.size());
  if (n == 0) return order;
  const int64_t mult = std::max<int64_t>(std::min<int64_t>(n / (batch_size * 4), 50), 1);
  const int64_t mega = mult * batch_size;
  auto len = [&](int64_t row) { return lengths.at(static_cast<size_t>(row)); };
  int64_t longest_at = 0;  // first element of the megabatch whose first element is longest (torch.argmax: first)
  for (int64_t begin = 0; begin < n; begin += mega) {
    auto first = order.begin() + begin, last = order.begin() + std::min(begin + mega, n);
    std::stable_sort(first, last, [&](int64_t a, int64_t b) { return len(a) > len(b); });
    if (len(*first) > len(order[longest_at])) longest_at = begin;
  }
  std::swap(order[0], order[longest_at]);
  return order;
}

DataLoader::DataLoader(std::shared_ptr<const Features> features, LoaderOptions options, CollatorOptions collator)
    : features_(std::move(features)), options_(options), collator_(std::move(collator)) {
  KILN_CHECK(features_ != nullptr, "DataLoader: no features");
  KILN_CHECK(options_.batch_size > 0, "DataLoader: batch_size must be positive, got ", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers);
  KILN_CHECK(options_.num_shards >= 1 && options_.shard >= 0 && options_.shard < options_.num_shards,
             "DataLoader: shard ", options_.shard, " of ", options_.num_shards, " is out of range");
  auto n = static_cast<int64_t>(features_->size());
  batches_per_epoch_ = options_.drop_last ? n / options_.batch_size
                                          : (n + options_.batch_size - 1) / options_.batch_size;
  KILN_CHECK(batches_per_epoch_ > 0, "DataLoader: ", n, " rows make no batch of ", options_.batch_size,
             options_.drop_last ? " with drop_last" : "");
  if (options_.length_grouped_batch > 0)  // HF's lengths: each row's input_ids
    for (const auto& ids : features_->input_ids) lengths_.push_back(static_cast<int64_t>(ids.size()));
  if (options_.num_workers > 0) {
    window_ = 2 * options_.num_workers;
    try {
      for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back([this] { worker_loop(); });
    } catch (const std::exception& e) {  // (no thread, or no memory for its state or the vector's growth)
      const size_t started = workers_.size();
      stop_workers();
      throw Error("DataLoader: could not start data-loading worker " + std::to_string(started + 1) + " of " +
                  std::to_string(options_.num_workers) + " (" + e.what() + "): ask for fewer (--dataloader_num_workers)");
    }
  }
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

DataLoader::~DataLoader() { stop_workers(); }

std::shared_ptr<const std::vector<int64_t>> DataLoader::permutation(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(perm_mu_);
  auto it = perms_.find(epoch);
  if (it != perms_.end()) return it->second;
  std::vector<int64_t> order =
      epoch_permutation(static_cast<int64_t>(features_->size()), options_.seed, epoch, options_.shuffle);
  if (options_.length_grouped_batch > 0) order = length_grouped(std::move(order), lengths_, options_.length_grouped_batch);
  auto p = std::make_shared<const std::vector<int64_t>>(std::move(order));
  perms_[epoch] = p;
  while (perms_.size() > 3) perms_.erase(perms_.begin()->first < epoch ? perms_.begin() : std::prev(perms_.end()));
  return p;
}

Batch DataLoader::make_batch(int64_t g) const {
  int64_t epoch = g / batches_per_epoch_, pos = g % batches_per_epoch_;
  auto perm = permutation(epoch);
  auto begin = pos * options_.batch_size;
  auto end = std::min<int64_t>(begin + options_.batch_size, static_cast<int64_t>(perm->size()));
  std::vector<int64_t> rows(perm->begin() + begin, perm->begin() + end);
  if (options_.num_shards == 1) return collate(*features_, rows, collator_, epoch);
  const auto B = static_cast<int64_t>(rows.size()), S = static_cast<int64_t>(options_.num_shards);
  const int64_t lo = options_.batch_size * options_.shard / S, hi = options_.batch_size * (options_.shard + 1) / S;
  std::vector<int64_t> mine(rows.begin() + std::min(lo, B), rows.begin() + std::min(hi, B));
  if (mine.empty()) {
    Batch b = collate(*features_, {rows.back()}, collator_, epoch, &rows);
    b.weight = 0;
    b.first_sample = B;
    return b;
  }
  Batch b = collate(*features_, mine, collator_, epoch, &rows);
  b.first_sample = std::min(lo, B);
  return b;
}

void DataLoader::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || next_issue_ < next_take_ + window_; });
    if (stop_) return;
    int64_t g = next_issue_++, gen = generation_;
    lock.unlock();
    Slot slot;
    try {
      slot.batch = make_batch(g);
    } catch (...) {
      slot.error = std::current_exception();
    }
    lock.lock();
    if (gen == generation_) {
      try {
        ready_.emplace(g, std::move(slot));
      } catch (...) {  // (out of memory: an exception may not leave the thread)
        if (!lost_) lost_ = std::current_exception();
      }
      ready_cv_.notify_all();
    }
  }
}

Batch DataLoader::next() {
  if (workers_.empty()) {
    int64_t g;
    {
      std::lock_guard<std::mutex> lock(mu_);
      g = next_take_;
    }
    Batch b = make_batch(g);  // a failure leaves the position unchanged
    std::lock_guard<std::mutex> lock(mu_);
    ++next_take_;
    return b;
  }
  std::unique_lock<std::mutex> lock(mu_);
  int64_t g = next_take_;
  ready_cv_.wait(lock, [&] { return ready_.count(g) > 0 || lost_; });
  Slot slot;
  if (auto it = ready_.find(g); it != ready_.end()) {
    slot = std::move(it->second);
    ready_.erase(it);
  } else {
    slot.error = std::exchange(lost_, nullptr);
  }
  if (slot.error) {
    // Leave the position where it was; a retry recomputes the batch.
    next_issue_ = std::min(next_issue_, g);
    for (auto it = ready_.begin(); it != ready_.end();) it = it->first >= g ? ready_.erase(it) : std::next(it);
    lost_ = nullptr;  // (a batch lost past g is made again too)
    ++generation_;
    work_cv_.notify_all();
    std::rethrow_exception(slot.error);
  }
  ++next_take_;
  work_cv_.notify_all();
  return std::move(slot.batch);
}

int64_t DataLoader::epoch() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_take_ / batches_per_epoch_;
}

int64_t DataLoader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_take_ % batches_per_epoch_;
}

void DataLoader::seek(int64_t epoch, int64_t position) {
  KILN_CHECK(epoch >= 0 && position >= 0 && position <= batches_per_epoch_, "DataLoader::seek: epoch ", epoch,
             ", position ", position, " is out of range (", batches_per_epoch_, " batches per epoch)");
  std::lock_guard<std::mutex> lock(mu_);
  ++generation_;
  ready_.clear();
  lost_ = nullptr;
  next_take_ = next_issue_ = epoch * batches_per_epoch_ + position;
  work_cv_.notify_all();
}

}  // namespace kiln::data
