// Reading a FILE argument (common/read_input.h), as srformer-client and the offline tools do.
#include "common/read_input.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/support/temp_dir.h"

namespace srformer {
namespace {

std::string message_of(const std::string& path) {
  try {
    read_input(path);
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

}  // namespace
}  // namespace srformer
