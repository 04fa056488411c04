// model/data/examples.h: the {"id", "document", "summary"} JSONL reader of `srformer train` and `eval`.
#include "model/data/examples.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "tests/support/temp_dir.h"

namespace srformer::data {
namespace {

namespace fs = std::filesystem;

const std::string kTwoLines =
    "{\"id\": \"a\", \"document\": \"first document\", \"summary\": \"first\"}\n"
    "{\"id\": \"b\", \"document\": \"second document\", \"summary\": \"second\"}\n";

// The message read_examples(path) throws, or "" when it reads the file.
std::string refusal(const fs::path& path) {
  try {
    read_examples(path.string());
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

// A pipe (bash's `<(jq ...)`, /dev/stdin) is read as a file is: it was refused as "no such file".
TEST(ReadExamples, ReadsAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], kTwoLines.data(), kTwoLines.size()), static_cast<ssize_t>(kTwoLines.size()));
  ::close(fds[1]);
  const auto examples = read_examples("/dev/fd/" + std::to_string(fds[0]));
  ::close(fds[0]);
  ASSERT_EQ(examples.size(), 2u);
  EXPECT_EQ(examples[1].id, "b");
  EXPECT_EQ(examples[1].document, "second document");
}

TEST(ReadExamples, AMissingPathOrADirectoryIsNamed) {
  testing::TempDir dir{"examples"};
  EXPECT_EQ(refusal(dir.path() / "nope.jsonl"),
            "cannot read '" + (dir.path() / "nope.jsonl").string() + "': no such file");
  EXPECT_EQ(refusal(dir.path()), "cannot read '" + dir.path().string() + "': a directory; pass a JSONL file");
}

}  // namespace
}  // namespace srformer::data
