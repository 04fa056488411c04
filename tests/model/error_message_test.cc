// error_message: what users see of an exception, LibTorch's without its C++ backtrace.
#include "model/error_message.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <stdexcept>

namespace srformer {
namespace {

TEST(ErrorMessage, LibTorchErrorsLoseTheirBacktraceAndKeepTheirMessage) {
  try {
    // Petabytes: the CPU allocator refuses, with a backtrace in what().
    (void)torch::empty({int64_t{1} << 50}, torch::kFloat32);
    FAIL() << "a 4 PB tensor was allocated";
  } catch (const std::exception& e) {
    const std::string full = e.what();
    const std::string shown = error_message(e);
    ASSERT_NE(full.find("frame #"), std::string::npos) << "LibTorch's what() carries no backtrace here:\n" << full;
    EXPECT_EQ(shown.find("frame #"), std::string::npos) << shown;
    EXPECT_EQ(shown.find('\n'), std::string::npos) << shown;
    EXPECT_NE(shown.find("can't allocate memory"), std::string::npos) << shown;
  }
  try {
    TORCH_CHECK(false, "the thing a user must fix");
  } catch (const std::exception& e) {
    EXPECT_EQ(error_message(e).rfind("the thing a user must fix", 0), 0u) << error_message(e);
  }
}

// libstdc++'s "filesystem error: status: Permission denied [DIR/config.json]" (a model directory the
// server's user may not search) becomes the path, the reason and what to do.
TEST(ErrorMessage, FilesystemErrorsNameThePathAndTheFix) {
  const std::filesystem::filesystem_error denied("status", "/models/t5/config.json",
                                                 std::make_error_code(std::errc::permission_denied));
  EXPECT_EQ(error_message(denied),
            "cannot access /models/t5/config.json: Permission denied (the user running this needs read permission "
            "on it and search (x) permission on every directory above it)");
  const std::filesystem::filesystem_error gone("status", "/x",
                                               std::make_error_code(std::errc::no_such_file_or_directory));
  EXPECT_EQ(error_message(gone), "cannot access /x: No such file or directory");
}

// An error that names no path (std::filesystem::temp_directory_path with TMPDIR not a directory) is shown
// with the call that failed, not as "cannot access : ...".
TEST(ErrorMessage, FilesystemErrorsWithoutAPathNameTheCall) {
  const std::filesystem::filesystem_error no_path("temp_directory_path",
                                                  std::make_error_code(std::errc::no_such_file_or_directory));
  EXPECT_EQ(error_message(no_path), no_path.what());
  EXPECT_NE(error_message(no_path).find("temp_directory_path"), std::string::npos) << error_message(no_path);
}

TEST(ErrorMessage, OtherExceptionsAreShownWhole) {
  const std::runtime_error plain("line one\nline two");
  EXPECT_EQ(error_message(plain), "line one\nline two");
}

}  // namespace
}  // namespace srformer
