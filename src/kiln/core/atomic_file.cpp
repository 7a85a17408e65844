#include "kiln/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "kiln/core/error.h"

namespace kiln {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

std::filesystem::path directory_of(const std::filesystem::path& path) {
  auto dir = path.parent_path();
  return dir.empty() ? std::filesystem::path(".") : dir;
}

// ".model.safetensors.tmp-<pid>-<n>-<random>": hidden, unique per process and
// call, and in the target's directory so that rename() never crosses devices.
std::filesystem::path temp_name(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string name = "." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                     std::to_string(counter++) + "-" + std::to_string(rng() % 1000000007ULL);
  return directory_of(path) / name;
}

// Durability of the rename itself; some filesystems refuse fsync on a
// directory, which does not make the write fail.
void fsync_directory(const std::filesystem::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  KILN_CHECK(!path_.empty() && path_.has_filename(), "write_file_atomic: '", path_.string(), "' is not a file path");
  for (int attempt = 0; attempt < 16; ++attempt) {
    temp_ = temp_name(path_);
    // 0666 before the umask, like any newly created file (mkstemp's 0600 would
    // make a saved model unreadable to other users).
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) break;
  }
  int err = errno;
  throw Error(detail::concat(path_.string(), ": cannot create a temporary file in '", directory_of(path_).string(),
                             "': ", errno_text(err)));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) abandon();
}

void AtomicFileWriter::abandon() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_.empty()) ::unlink(temp_.c_str());
  temp_.clear();
}

void AtomicFileWriter::append(std::string_view bytes) {
  KILN_CHECK(fd_ >= 0 && !committed_, path_.string(), ": write after commit or failure");
  const char* p = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      abandon();
      throw Error(detail::concat(path_.string(), ": write failed: ", errno_text(err)));
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  KILN_CHECK(fd_ >= 0 && !committed_, path_.string(), ": commit after commit or failure");
  auto fail = [&](const char* what) {
    int err = errno;
    abandon();
    throw Error(detail::concat(path_.string(), ": ", what, " failed: ", errno_text(err)));
  };
  if (::fsync(fd_) != 0) fail("fsync");
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("close");
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("rename");
  committed_ = true;
  temp_.clear();
  fsync_directory(directory_of(path_));
}

void write_file_atomic(const std::filesystem::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.append(bytes);
  writer.commit();
}

}  // namespace kiln
