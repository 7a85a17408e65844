#pragma once
// Opening and reading input files. Every file kiln reads goes through here, so
// a FIFO, socket or device named where a file is expected is refused at once
// instead of blocking open() or read() forever.
#include <filesystem>
#include <string>

namespace kiln {

// An open, regular file (closed on destruction). Throws kiln::Error naming
// `path` when it is missing, unreadable, a directory or not a regular file;
// opening never blocks.
class RegularFile {
 public:
  explicit RegularFile(const std::filesystem::path& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file (a regular file, see RegularFile).
std::string read_file(const std::filesystem::path& path);

// Throws as RegularFile does when `path` could not be read as a regular file;
// for files a library opens itself (SentencePiece models).
void check_regular_file(const std::filesystem::path& path);

}  // namespace kiln
