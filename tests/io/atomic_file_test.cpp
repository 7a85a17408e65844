#include "kiln/core/atomic_file.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include "io/io_test_util.h"

namespace kiln::io {
namespace {

using testing::TempDir;
using testing::throws_with;

TEST(AtomicFile, WritesAndReadsBinaryBytes) {
  TempDir dir;
  std::string bytes("a\0b\nc\xff", 6);
  write_file_atomic(dir / "f.bin", bytes);
  EXPECT_EQ(read_file(dir / "f.bin"), bytes);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"f.bin"});
}

TEST(AtomicFile, EmptyFile) {
  TempDir dir;
  write_file_atomic(dir / "empty", "");
  EXPECT_EQ(read_file(dir / "empty"), "");
}

TEST(AtomicFile, ReplacesExistingFileAndLeavesNoTempFiles) {
  TempDir dir;
  write_file_atomic(dir / "config.json", std::string(100000, 'x'));
  write_file_atomic(dir / "config.json", "short");
  EXPECT_EQ(read_file(dir / "config.json"), "short");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"config.json"});
}

TEST(AtomicFile, NewFileHasUmaskPermissions) {
  TempDir dir;
  mode_t old = ::umask(022);
  write_file_atomic(dir / "f", "x");
  ::umask(old);
  struct stat st{};
  ASSERT_EQ(::stat((dir / "f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(AtomicFile, WriteIntoMissingDirectoryThrowsNamingPath) {
  TempDir dir;
  auto path = dir / "no_such_dir" / "model.safetensors";
  EXPECT_TRUE(throws_with([&] { write_file_atomic(path, "x"); }, {path.string(), "No such file or directory"}));
  EXPECT_TRUE(dir.listing().empty());
}

TEST(AtomicFile, WriterWithoutCommitLeavesTargetUntouched) {
  TempDir dir;
  write_file_atomic(dir / "f", "old");
  {
    AtomicFileWriter w(dir / "f");
    w.append("new, but never committed");
  }
  EXPECT_EQ(read_file(dir / "f"), "old");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"f"});
}

TEST(AtomicFile, WriterAppendsInPieces) {
  TempDir dir;
  AtomicFileWriter w(dir / "f");
  w.append("ab");
  w.append("");
  w.append("cd");
  w.commit();
  EXPECT_EQ(read_file(dir / "f"), "abcd");
  EXPECT_THROW(w.append("x"), kiln::Error);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"f"});
}

TEST(AtomicFile, RenameOntoDirectoryFailsAndCleansUp) {
  TempDir dir;
  std::filesystem::create_directories(dir / "target" / "child");
  EXPECT_TRUE(throws_with([&] { write_file_atomic(dir / "target", "x"); }, {(dir / "target").string(), "rename"}));
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"target"});
}

TEST(ReadFile, MissingFileThrowsNamingIt) {
  TempDir dir;
  auto path = dir / "missing.json";
  EXPECT_TRUE(throws_with([&] { read_file(path); }, {path.string(), "No such file"}));
}

TEST(ReadFile, DirectoryThrowsNamingIt) {
  TempDir dir;
  EXPECT_TRUE(throws_with([&] { read_file(dir.path()); }, {dir.path().string(), "directory"}));
}

}  // namespace
}  // namespace kiln::io
