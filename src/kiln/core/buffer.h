#pragma once
// Device memory and its readiness. Execution is asynchronous: a Buffer may be
// handed out before the step that fills it has run; Event says when it has
// (or that it failed, and why).
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "kiln/core/device.h"

namespace kiln {

// Signalled once, by the stream that runs the producing step.
class Event {
 public:
  void signal(std::string error = {});
  void wait() const;  // blocks until signalled
  bool ready() const;
  // Empty unless the producing step failed. Valid after wait().
  const std::string& error() const { return error_; }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
};

// Device memory: an owned, 64-byte aligned allocation, or borrowed memory
// kept alive by `keeper` (e.g. a tensor inside a memory-mapped file).
class Storage {
 public:
  Storage(Device device, size_t nbytes);
  Storage(Device device, void* borrowed, size_t nbytes, std::shared_ptr<const void> keeper);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return ptr_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Device device_;
  size_t nbytes_;
  void* ptr_ = nullptr;
  std::shared_ptr<const void> keeper_;  // set when borrowed
};

// A value's memory: storage (shared when a step donates an input's memory to
// its output) plus the event of the step that writes it (null: ready now).
struct Buffer {
  std::shared_ptr<Storage> storage;
  std::shared_ptr<Event> ready;
  // Set when a step took this memory for one of its outputs: the value is gone.
  bool donated = false;

  // Blocks until written; throws kiln::Error if the producing step failed.
  void wait() const;
};

}  // namespace kiln
