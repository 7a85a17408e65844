#include "kiln/train/output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "kiln/core/error.h"
#include "kiln/core/json.h"

namespace kiln::train {

namespace fs = std::filesystem;

namespace {

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// The deepest existing ancestor of `p` (or p itself), "" when none exists.
fs::path existing_ancestor(const fs::path& p) {
  std::error_code ec;
  for (fs::path at = p; !at.empty(); at = at.parent_path()) {
    if (fs::exists(fs::symlink_status(at, ec))) return at;
    if (at == at.parent_path()) break;
  }
  return {};
}

// Processes' locks by directory: flock() locks of two open() calls conflict
// even within one process, so a second acquire here shares the first.
std::mutex g_locks_mu;
std::map<std::string, std::weak_ptr<OutputDirLock>>& held_locks() {
  static std::map<std::string, std::weak_ptr<OutputDirLock>> locks;
  return locks;
}

}  // namespace

void prepare_output_dir(const fs::path& dir) {
  KILN_CHECK(!dir.empty(), "output_dir is empty: pass --output_dir DIR");
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  KILN_CHECK(!fs::exists(st) || fs::is_directory(st), "output_dir ", quoted(dir), " is a file, not a directory");
  if (!fs::exists(st)) {
    const fs::path above = existing_ancestor(dir.parent_path());
    KILN_CHECK(above.empty() || fs::is_directory(above), "output_dir ", quoted(dir), " cannot be created: ",
               quoted(above), " is a file, not a directory");
    fs::create_directories(dir, ec);
    KILN_CHECK(!ec, "output_dir ", quoted(dir), " cannot be created: ", ec.message());
  }
  const fs::path probe = dir / (".kiln-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, "output_dir ", quoted(dir), " is not writable: ", std::strerror(errno));
  const bool wrote = ::write(fd, "k", 1) == 1;
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  const int close_errno = errno;
  ::unlink(probe.c_str());
  KILN_CHECK(wrote && closed, "output_dir ", quoted(dir), " is not writable: ",
             std::strerror(wrote ? close_errno : write_errno));
}

std::shared_ptr<OutputDirLock> OutputDirLock::acquire(const fs::path& dir) {
  const fs::path file = dir / kLockFileName;
  std::error_code ec;
  std::string key = fs::weakly_canonical(dir, ec).string();
  if (ec) key = fs::absolute(dir).string();
  std::lock_guard<std::mutex> lock(g_locks_mu);
  if (auto held = held_locks()[key].lock()) return held;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  KILN_CHECK(fd >= 0, "output_dir ", quoted(dir), ": cannot open the lock file ", file.string(), ": ",
             std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    std::string pid(32, '\0');
    const ssize_t n = ::pread(fd, pid.data(), pid.size(), 0);
    pid.resize(n > 0 ? static_cast<size_t>(n) : 0);
    while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
    ::close(fd);
    KILN_CHECK(err != EWOULDBLOCK, "output_dir ", quoted(dir), " is in use by another run: ", file.string(),
               " is locked by pid ", pid.empty() ? std::string("(unknown)") : pid,
               " (wait for it to end, or choose another --output_dir)");
    throw Error("output_dir " + quoted(dir) + ": cannot lock " + file.string() + ": " + std::strerror(err));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    ::close(fd);
    throw Error("output_dir " + quoted(dir) + ": cannot write " + file.string() + ": " + std::strerror(err));
  }
  auto made = std::make_shared<OutputDirLock>(Held{}, key, fd);
  held_locks()[key] = made;
  return made;
}

OutputDirLock::~OutputDirLock() {
  std::lock_guard<std::mutex> lock(g_locks_mu);
  // The file stays: removing it would let a waiting process lock a file no longer in the directory.
  ::close(fd_);
  auto it = held_locks().find(key_);
  if (it != held_locks().end() && it->second.expired()) held_locks().erase(it);
}

void discard_checkpoint(const fs::path& dir) {
  const fs::path away = dir.parent_path() / (".deleting-" + dir.filename().string());
  fs::remove_all(away);  // a leftover of the same name
  fs::rename(dir, away);
  fs::remove_all(away);
}

void remove_checkpoint_leftovers(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tmp-checkpoint-", 0) == 0 || name.rfind(".deleting-checkpoint-", 0) == 0)
      fs::remove_all(e.path());
  }
}

std::string missing_checkpoint_file(const fs::path& dir) {
  // A LoRA run's checkpoints hold PEFT's adapter files instead of the model's.
  const bool adapter = fs::exists(dir / "adapter_config.json");
  for (const char* f : {adapter ? "adapter_model.safetensors" : "config.json", adapter ? "adapter_config.json" : "model.safetensors",
                        "training_args.json", "trainer_state.json"})
    if (!fs::exists(dir / f)) return f;
  bool model_only = false;
  try {
    const nlohmann::json saved = read_json_file(dir / "training_args.json");
    model_only = saved.is_object() && saved.value("save_only_model", false);
  } catch (const std::exception&) {  // unreadable: resuming names the problem
  }
  if (!model_only)
    for (const char* f : {"optimizer.safetensors", "scheduler.json", "rng_state.json"})
      if (!fs::exists(dir / f)) return f;
  return {};
}

}  // namespace kiln::train
