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

// Memory of a device kind other than the host's, provided by its backend
// (backend/cuda registers these for DeviceKind::CUDA), so that core needs no
// device headers. Each throws kiln::Error on failure, except release.
struct DeviceMemoryHooks {
  void* (*allocate)(Device device, size_t nbytes);
  void (*release)(Device device, void* ptr, size_t nbytes) noexcept;
  // Synchronous copies between host memory and the device's memory.
  void (*to_device)(Device device, void* dst, const void* src, size_t nbytes);
  void (*to_host)(Device device, void* dst, const void* src, size_t nbytes);
};
// Installs the hooks of a device kind (a static pointer; called once).
void register_device_memory(DeviceKind kind, const DeviceMemoryHooks* hooks);

// Device memory: an owned allocation (CPU: 64-byte aligned host memory;
// other kinds: from their backend), or borrowed memory kept alive by
// `keeper` (e.g. a tensor inside a memory-mapped file).
class Storage {
 public:
  Storage(Device device, size_t nbytes);
  Storage(Device device, void* borrowed, size_t nbytes, std::shared_ptr<const void> keeper);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // Host memory for CPU devices; device memory (not host-readable) otherwise.
  void* data() const { return ptr_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool on_host() const { return device_.kind == DeviceKind::CPU; }
  // Copies nbytes between host memory and this storage at byte `offset`,
  // whatever the device (a memcpy for CPU devices).
  void copy_from_host(const void* src, size_t nbytes, size_t offset = 0);
  void copy_to_host(void* dst, size_t nbytes, size_t offset = 0) const;

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
