#pragma once
// DataLoader: epochs of batches over tokenized rows, with seeded per-epoch
// shuffling and optional worker threads that collate ahead. DeviceLoader:
// turns those host batches into device Tensors on a background thread with a
// bounded queue, so batch n+1 is transferred while step n runs (PyTorch/XLA's
// MpDeviceLoader).
//
// Batch g of the whole run (g = epoch * batches_per_epoch + position) is a
// pure function of (features, options, collator, g): the permutation of an
// epoch comes from (seed, epoch), MLM masking from (seed, epoch, row). So the
// worker count never changes what comes out, and seek() resumes exactly.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/core/device.h"
#include "kiln/data/collator.h"
#include "kiln/runtime/tensor.h"

namespace kiln::data {

struct LoaderOptions {
  int64_t batch_size = 8;
  bool shuffle = true;
  uint64_t seed = 42;
  bool drop_last = false;  // drop a final partial batch
  int num_workers = 0;     // threads collating ahead; 0 = on the caller's thread
  // Data parallelism: batch_size is the global batch; this loader yields
  // rows [shard * batch_size / num_shards, (shard + 1) * ...) of each, padded
  // like the whole batch. A shard left empty by a short last batch gets the
  // batch's last row with weight 0 (Batch::weight), so every replica still
  // runs the step.
  int shard = 0, num_shards = 1;
  // > 0: HF's group_by_length (LengthGroupedSampler) with this batch size
  // (the global batch times gradient accumulation): see length_grouped.
  int64_t length_grouped_batch = 0;
};

// The order of rows in `epoch`: identity without shuffle, else a Fisher-Yates
// permutation drawn from (seed, epoch) — the same on every run and platform.
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch, bool shuffle);

// HF's get_length_grouped_indices applied to a shuffled order: cut `order`
// into megabatches of mult * batch_size rows (mult = min(n / (4 * batch_size),
// 50), at least 1), sort each by length, longest first (stable), and swap the
// longest row of all to the very front, so the largest batch runs first and
// an out-of-memory shows at once. Rows of similar length share batches, so
// dynamic padding pads less.
std::vector<int64_t> length_grouped(std::vector<int64_t> order, const std::vector<int64_t>& lengths,
                                    int64_t batch_size);

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Features> features, LoaderOptions options, CollatorOptions collator);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  const LoaderOptions& options() const { return options_; }
  const Features& features() const { return *features_; }

  // The next batch; crosses into the next epoch after the last one. Rethrows
  // a worker's error (say, a row longer than max_length).
  Batch next();
  int64_t epoch() const;     // epoch of the batch next() returns next
  int64_t position() const;  // batches already taken in that epoch
  // Continue as if `position` batches of `epoch` had been taken (a resumed
  // run); discards prefetched work. 0 <= position <= batches_per_epoch().
  void seek(int64_t epoch, int64_t position);

  // Batch g of the run, computed on the calling thread (what next() returns
  // for it, whatever the worker count).
  Batch make_batch(int64_t g) const;

 private:
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;
  void worker_loop();
  void stop_workers();  // stops and joins the workers started

  std::shared_ptr<const Features> features_;
  LoaderOptions options_;
  CollatorOptions collator_;
  int64_t batches_per_epoch_ = 0;
  std::vector<int64_t> lengths_;  // per row, when grouping by length

  // Permutations of the epochs in use (workers near an epoch boundary need two).
  mutable std::mutex perm_mu_;
  mutable std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> perms_;

  // Prefetch window: workers take batch numbers in order from next_issue_,
  // never more than `window_` past next_take_; results wait in ready_.
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  mutable std::mutex mu_;
  std::condition_variable work_cv_, ready_cv_;
  int64_t next_take_ = 0;   // the batch next() returns next
  int64_t next_issue_ = 0;  // the next batch a worker starts
  int64_t generation_ = 0;  // bumped by seek(): results of older work are dropped
  int64_t window_ = 0;
  std::map<int64_t, Slot> ready_;
  // A finished batch that could not be put in ready_ (out of memory): next()
  // fails with this, as with a worker's error, instead of waiting for it.
  std::exception_ptr lost_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// tensors: "input_ids", "attention_mask", "token_type_ids" (i64 [B,T]) and
// "labels" (i64 [B] or [B,T] for MLM, f32 [B] for regression) when the batch
// has them; the names are the graph inputs' names in compile reasons.
// epoch / position: where this batch sits (position = its index in the epoch).
// After training on it, the loader state to save is (epoch, position + 1).
struct DeviceBatch {
  std::map<std::string, Tensor> tensors;
  int64_t epoch = 0, position = 0;
  Batch host;
};

// The host batch as named device tensors (what the DeviceLoader's thread does).
std::map<std::string, Tensor> to_device(const Batch& b, Device device);

class DeviceLoader {
 public:
  // Takes batches from `loader` (which must outlive this object, and which
  // nobody else reads meanwhile: the thread runs ahead of what next() has
  // returned, so seek the DataLoader before creating the DeviceLoader).
  DeviceLoader(DataLoader& loader, Device device, size_t prefetch = 2);
  ~DeviceLoader();
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  DeviceBatch next();          // rethrows the loader's error
  double wait_seconds() const;  // total time next() blocked waiting for data

 private:
  void run();

  DataLoader& loader_;
  Device device_;
  size_t prefetch_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<DeviceBatch> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  double wait_seconds_ = 0;
  std::thread thread_;
};

}  // namespace kiln::data
