#include "kiln/core/file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kiln/core/error.h"

namespace kiln {

namespace {
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}
}  // namespace

RegularFile::RegularFile(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO without a writer would otherwise wait forever.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0) {
    const int err = errno;
    throw Error(detail::concat(path.string(), ": cannot open: ", std::strerror(err)));
  }
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(detail::concat(path.string(), ": cannot stat: ", std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw Error(detail::concat(path.string(), ": is ", kind_of(st.st_mode), ", expected a regular file"));
  }
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_file(const std::filesystem::path& path) {
  RegularFile file(path);
  std::string out;
  out.reserve(file.size());
  // Read to EOF rather than trusting the size: the file may grow meanwhile.
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = ::read(file.fd(), chunk, sizeof chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw Error(detail::concat(path.string(), ": read failed: ", std::strerror(err)));
    }
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
  }
  return out;
}

void check_regular_file(const std::filesystem::path& path) { RegularFile file(path); }

}  // namespace kiln
