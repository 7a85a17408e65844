#pragma once
// A training run's output directory: checked to be a writable directory
// before anything runs, locked against a second run, and its checkpoint-N
// directories removed as whole as they are published (a save writes
// tmp-checkpoint-N and renames it).
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

namespace kiln::train {

// The lock file a run holds in its output directory.
inline constexpr const char* kLockFileName = ".kiln.lock";

// Creates `dir` (and its parents), then writes and removes a probe file in
// it. Throws kiln::Error naming the directory and the reason when it is a
// file, or cannot be created or written.
void prepare_output_dir(const std::filesystem::path& dir);

// An advisory lock (flock) on dir/.kiln.lock, which holds the pid of the
// process that took it: a second run on the directory fails at once, naming
// that pid. The kernel releases it when the process ends, however it ends.
// Taking it again in the process that holds it shares the one lock.
class OutputDirLock {
 public:
  static std::shared_ptr<OutputDirLock> acquire(const std::filesystem::path& dir);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  struct Held {};  // only acquire() constructs one
 public:
  OutputDirLock(Held, std::string key, int fd) : key_(std::move(key)), fd_(fd) {}

 private:
  std::string key_;  // the directory, canonical
  int fd_;           // open, and flock()ed
};

// Removes checkpoint directory `dir` as atomically as it was published: it
// is renamed to .deleting-checkpoint-N first, so a process killed while
// removing it never leaves a checkpoint-N with files missing.
void discard_checkpoint(const std::filesystem::path& dir);

// Removes what killed runs left in output directory `dir`: tmp-checkpoint-N
// (a save that did not finish) and .deleting-checkpoint-N (a removal that
// did not). Only the holder of the directory's lock may call it.
void remove_checkpoint_leftovers(const std::filesystem::path& dir);

// The first file checkpoint directory `dir` lacks to resume from, or empty
// when it is complete (a save_only_model checkpoint needs the model only).
std::string missing_checkpoint_file(const std::filesystem::path& dir);

}  // namespace kiln::train
