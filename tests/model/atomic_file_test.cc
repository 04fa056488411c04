#include "model/io/atomic_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/model/io_test_util.h"

namespace srformer {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::ScratchDir;
using testing::write_bytes;

mode_t mode_of(const fs::path& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// A config.json made private (0600) or group-writable (0664) became 0644 at the next save, readable by
// everyone or no longer writable by the group; editors and install(1) keep the mode of the file replaced.
TEST(AtomicFile, KeepsTheModeOfTheFileItReplaces) {
  const ScratchDir dir;
  for (const mode_t mode : {0600, 0664, 0444}) {
    SCOPED_TRACE(mode);
    const auto path = dir / ("f" + std::to_string(mode));
    write_bytes(path, "old");
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    write_file_atomically(path, "new");
    EXPECT_EQ(read_bytes(path), "new");
    EXPECT_EQ(mode_of(path), mode);
  }
  const mode_t mask = ::umask(022);
  ::umask(mask);
  write_file_atomically(dir / "fresh", "new");
  EXPECT_EQ(mode_of(dir / "fresh"), 0644 & ~mask);
}

// A save over a Hugging Face cache snapshot (config.json -> ../../blobs/<hash>) replaces the link with a
// regular file: the blob, content-addressed and shared by every snapshot that holds the same file, keeps
// its bytes. The new file takes the mode of the file the link named.
TEST(AtomicFile, ReplacesASymlinkAndLeavesItsTargetAlone) {
  const ScratchDir dir;
  fs::create_directories(dir / "blobs");
  fs::create_directories(dir / "snapshots" / "rev");
  write_bytes(dir / "blobs" / "abc", "old");
  ASSERT_EQ(::chmod((dir / "blobs" / "abc").c_str(), 0640), 0);
  const auto link = dir.path() / "snapshots" / "rev" / "config.json";
  fs::create_symlink("../../blobs/abc", link);
  write_file_atomically(link, "new");
  EXPECT_FALSE(fs::is_symlink(link));
  EXPECT_EQ(read_bytes(link), "new");
  EXPECT_EQ(mode_of(link), 0640u);
  EXPECT_EQ(read_bytes(dir / "blobs" / "abc"), "old");
}

TEST(AtomicFile, CopiesAFileWholeOverASymlink) {
  const ScratchDir dir;
  std::string big(3 << 20, '\0');  // more than one read
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + i / 4096);
  write_bytes(dir / "from", big);
  write_bytes(dir / "blob", "old");
  fs::create_symlink("blob", dir / "to");
  copy_file_atomically(dir / "from", dir / "to");
  EXPECT_FALSE(fs::is_symlink(dir / "to"));
  EXPECT_EQ(read_bytes(dir / "to"), big);
  EXPECT_EQ(read_bytes(dir / "blob"), "old");
  EXPECT_THROW(copy_file_atomically(dir / "missing", dir / "to"), std::runtime_error);
  EXPECT_EQ(read_bytes(dir / "to"), big);
}

}  // namespace
}  // namespace srformer
