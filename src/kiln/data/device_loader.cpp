#include "kiln/data/loader.h"

#include <chrono>

#include "kiln/core/error.h"

namespace kiln::data {

std::map<std::string, Tensor> to_device(const Batch& b, Device device) {
  std::map<std::string, Tensor> t;
  Shape bt = b.num_choices > 0 ? Shape{b.batch_size, b.num_choices, b.seq_len} : Shape{b.batch_size, b.seq_len};
  t.emplace("input_ids", Tensor::from_vector(b.input_ids, bt, device, "input_ids"));
  t.emplace("attention_mask", Tensor::from_vector(b.attention_mask, bt, device, "attention_mask"));
  t.emplace("token_type_ids", Tensor::from_vector(b.token_type_ids, bt, device, "token_type_ids"));
  if (!b.labels.empty()) {
    Shape ls = b.target_len > 0                                          ? Shape{b.batch_size, b.target_len}
               : !b.token_labels && static_cast<int64_t>(b.labels.size()) == b.batch_size ? Shape{b.batch_size}
                                                                       : bt;
    t.emplace("labels", Tensor::from_vector(b.labels, ls, device, "labels"));
  } else if (!b.float_labels.empty()) {
    t.emplace("labels", Tensor::from_vector(b.float_labels, Shape{b.batch_size}, device, "labels"));
  }
  if (!b.position_ids.empty()) t.emplace("position_ids", Tensor::from_vector(b.position_ids, bt, device, "position_ids"));
  if (!b.start_positions.empty()) {
    t.emplace("start_positions", Tensor::from_vector(b.start_positions, Shape{b.batch_size}, device, "start_positions"));
    t.emplace("end_positions", Tensor::from_vector(b.end_positions, Shape{b.batch_size}, device, "end_positions"));
  }
  return t;
}

DeviceLoader::DeviceLoader(DataLoader& loader, Device device, size_t prefetch)
    : loader_(loader), device_(device), prefetch_(prefetch == 0 ? 1 : prefetch) {
  thread_ = std::thread([this] { run(); });
}

DeviceLoader::~DeviceLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DeviceLoader::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || queue_.size() < prefetch_; });
      if (stop_) return;
    }
    DeviceBatch db;
    try {
      db.epoch = loader_.epoch();
      db.position = loader_.position();
      db.host = loader_.next();
      db.tensors = to_device(db.host, device_);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
      cv_.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(db));
    cv_.notify_all();
  }
}

DeviceBatch DeviceLoader::next() {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || error_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (queue_.empty()) std::rethrow_exception(error_);
  DeviceBatch db = std::move(queue_.front());
  queue_.pop_front();
  cv_.notify_all();
  return db;
}

double DeviceLoader::wait_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return wait_seconds_;
}

}  // namespace kiln::data
