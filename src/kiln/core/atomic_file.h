#pragma once
// Whole-file reads and crash-safe writes. A file is replaced by writing a
// temporary file next to it, fsync-ing it and renaming it over the target, so
// a reader (or a memory mapping of the old file) sees either the old bytes or
// the new ones, never a partial file — even if the writer is killed.
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "kiln/core/file.h"  // read_file

namespace kiln {

// Writes via a temp file in the same directory + fsync + rename. Throws
// kiln::Error naming `path` on failure; the temp file is removed then.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// For files written in pieces (a checkpoint larger than one string should
// hold): append(), then commit() publishes the file. Destroying the writer
// without commit() removes the temp file and leaves `path` untouched.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void append(std::string_view bytes);
  void commit();  // fsync, rename over path, fsync the directory
  const std::filesystem::path& path() const { return path_; }

 private:
  void abandon() noexcept;

  std::filesystem::path path_;
  std::filesystem::path temp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace kiln
