#pragma once
// A device's execution stream: one worker thread running queued steps in
// order, so the host can trace step n+1 while step n runs.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace kiln::runtime {

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void enqueue(std::function<void()> task);
  // Tasks queued or running.
  size_t pending() const;
  // Blocks until every queued task has run.
  void synchronize();
  // Holds the worker before its next task (tests use it to observe that
  // mark_step() does not wait for execution).
  void pause();
  void resume();

 private:
  void loop();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::function<void()>> queue_;
  size_t running_ = 0;
  bool paused_ = false;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace kiln::runtime
