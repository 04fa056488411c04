// The exit check on stdout (common/stdout_check.h) of srformer-client, srformer-server and the offline tools.
#include "common/stdout_check.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdio_ext.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace srformer {
namespace {

struct Outcome {
  int status = -1;
  std::string err;
};

// `print` run with stdout on /dev/full (a full disk), then the check's status for `status` and its stderr.
template <typename Print>
Outcome with_stdout_on_dev_full(int status, Print print) {
  std::cout.flush();
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  EXPECT_GE(full, 0);
  ::dup2(full, STDOUT_FILENO);
  ::close(full);
  Outcome out;
  testing::internal::CaptureStderr();
  {
    StdoutCheck check("prog");
    print();
    out.status = check.exit_status(status);
  }
  out.err = testing::internal::GetCapturedStderr();
  __fpurge(stdout);  // what never went out stays out of the real stdout
  std::clearerr(stdout);
  std::cout.clear();
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  return out;
}

// A text past stdio's 4 KiB buffer fails while printing; by the check, other calls have set errno. The
// check said "Input/output error" of a full disk.
TEST(StdoutCheck, SaysWhyOutputThatFailedWhilePrintingWasLost) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto r = with_stdout_on_dev_full(0, [] {
    std::cout << std::string(10000, 'x') << "\n";
    errno = EAGAIN;  // as a later read of a socket leaves it
  });
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "prog: cannot write to stdout: No space left on device\n");
}

TEST(StdoutCheck, SaysWhyOutputThatFailedAtTheLastFlushWasLost) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto r = with_stdout_on_dev_full(0, [] { std::cout << "a short summary\n"; });
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "prog: cannot write to stdout: No space left on device\n");
  // A failure of its own keeps its status.
  EXPECT_EQ(with_stdout_on_dev_full(2, [] { std::cout << "usage\n"; }).status, 2);
}

TEST(StdoutCheck, OutputThatArrivedOrNoneKeepsTheStatus) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const auto none = with_stdout_on_dev_full(0, [] {});
  EXPECT_EQ(none.status, 0);
  EXPECT_EQ(none.err, "");
  testing::internal::CaptureStderr();
  int status = -1;
  {
    StdoutCheck check("prog");
    std::cout << "[ check    ] reached stdout\n";
    status = check.exit_status(3);
  }
  EXPECT_EQ(status, 3);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

}  // namespace
}  // namespace srformer
