// Reading a FILE argument (common/read_input.h), as srformer-client and the offline tools do.
#include "common/read_input.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

std::string message_of(const std::string& path, std::uintmax_t max_bytes = kMaxInputBytes) {
  try {
    read_input(path, max_bytes);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ReadInput, ReadsAFileAndDropsOnlyALeadingByteOrderMark) {
  const testing::TempDir dir("read-input");
  const auto file = dir.path() / "doc.txt";
  std::ofstream(file, std::ios::binary) << "\xEF\xBB\xBFone \xEF\xBB\xBFtwo\n";
  EXPECT_EQ(read_input(file.string()), "\xEF\xBB\xBFone \xEF\xBB\xBFtwo\n");
  EXPECT_EQ(read_document(file.string()), "one \xEF\xBB\xBFtwo\n");
}

TEST(ReadInput, EachFailureNamesTheFileAndWhy) {
  EXPECT_EQ(message_of("/nonexistent/doc.txt"), "cannot read '/nonexistent/doc.txt': No such file or directory");
  EXPECT_EQ(message_of("/"), "cannot read '/': it is a directory");
  // Opens, then its first read fails (EIO): the stream buffer's own words named no file.
  EXPECT_EQ(message_of("/proc/self/mem"), "cannot read '/proc/self/mem': Input/output error");
}

// Read whole without a bound, /dev/zero or a huge file took all the memory there was: past the bound the
// read stops with an error naming the file and the bound.
TEST(ReadInput, MoreThanTheBoundIsRefusedByName) {
  const testing::TempDir dir("read-input");
  const auto file = dir.path() / "doc.txt";
  std::ofstream(file, std::ios::binary) << std::string(1024, 'x');
  EXPECT_EQ(read_input(file.string(), 1024).size(), 1024u);
  EXPECT_EQ(message_of(file.string(), 1023),
            "cannot read '" + file.string() + "': it holds more than 1023 bytes, the most one input may have");
  // A device without end is read in chunks up to the bound, then refused.
  EXPECT_EQ(message_of("/dev/zero", 100000),
            "cannot read '/dev/zero': it holds more than 100000 bytes, the most one input may have");
  // A caller's bound says what sets it: the client's --max-document-bytes.
  try {
    read_input("/dev/zero", 100000, "--max-document-bytes raises it");
    ADD_FAILURE() << "no error";
  } catch (const std::exception& e) {
    EXPECT_STREQ(e.what(),
                 "cannot read '/dev/zero': it holds more than 100000 bytes, the most one input may have "
                 "(--max-document-bytes raises it)");
  }
  // A regular file past the default bound (2 GiB - 1, gRPC's largest message; sparse here) is refused by
  // its size, before any of it is read.
  const auto huge = dir.path() / "huge.txt";
  std::ofstream(huge, std::ios::binary).put('x');
  std::filesystem::resize_file(huge, std::uintmax_t{3} << 30);
  EXPECT_EQ(message_of(huge.string()), "cannot read '" + huge.string() +
                                           "': it holds more than 2147483647 bytes, the most one input may have (the "
                                           "largest message gRPC carries)");
}

// fd 0 as `path` opened with `flags` while it lives, then stdin as it was (std::cin and stdio's state too).
class StdinFrom {
 public:
  StdinFrom(const char* path, int flags) : saved_(::dup(STDIN_FILENO)) {
    const int fd = ::open(path, flags);
    ::dup2(fd, STDIN_FILENO);
    ::close(fd);
    std::clearerr(stdin);
    std::cin.clear();
  }
  ~StdinFrom() {
    ::dup2(saved_, STDIN_FILENO);
    ::close(saved_);
    std::clearerr(stdin);
    std::cin.clear();
  }
  StdinFrom(const StdinFrom&) = delete;
  StdinFrom& operator=(const StdinFrom&) = delete;

 private:
  const int saved_;
};

// stdin's failures said "cannot read '-'", a stray dash, and a stdin that cannot be read (closed: here opened
// only for writing, whose reads fail with EBADF as a closed one's) was read as an empty document: std::cin,
// which reads through stdio, only ends. Both name stdin, and the read error is one.
TEST(ReadInput, StdinIsNamedAndAReadErrorOfItIsAnError) {
  {
    const StdinFrom in("/dev/null", O_WRONLY);
    EXPECT_EQ(message_of("-"), "cannot read stdin: Bad file descriptor");
  }
  {
    const StdinFrom in("/dev/zero", O_RDONLY);
    EXPECT_EQ(message_of("-", 100000),
              "cannot read stdin: it holds more than 100000 bytes, the most one input may have");
  }
  const StdinFrom in("/dev/null", O_RDONLY);  // an empty stdin is an empty document, no error
  EXPECT_EQ(message_of("-"), "(no error)");
}

}  // namespace
}  // namespace srformer
