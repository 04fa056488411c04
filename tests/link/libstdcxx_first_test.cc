// cmake/Dependencies.cmake lists libstdc++ first among an executable's libraries, so that a library
// carrying its own copy of std::filesystem code (PyTorch's wheels) cannot take over libstdc++'s calls.
// This binary is linked like our model binaries, plus a stand-in copy (filesystem_copy.cc) after the
// flag: with the flag gone, removing a non-empty directory aborts inside the stand-in.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/std_symbol_owner.h"
#include "tests/support/temp_dir.h"

namespace srformer::testing {
namespace {

TEST(LibstdcxxFirst, TheStandInCopyIsLoadedButLibstdcxxServesTheSymbol) {
  EXPECT_NE(::dlopen("libsrformer_filesystem_copy.so", RTLD_NOLOAD | RTLD_LAZY), nullptr)
      << "the stand-in library is not loaded: this test checks nothing";
  EXPECT_NE(symbol_owner(kRecursiveDirectoryIteratorCtor).find("libstdc++"), std::string::npos)
      << "bound to " << symbol_owner(kRecursiveDirectoryIteratorCtor);
}

TEST(LibstdcxxFirst, RemovingANonEmptyDirectoryStaysInsideLibstdcxx) {
  const auto root = std::filesystem::temp_directory_path() / ("srformer-link-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "inner");
  std::ofstream(root / "inner" / "file") << "x";
  EXPECT_EQ(std::filesystem::remove_all(root), 3U);
  EXPECT_FALSE(std::filesystem::exists(root));
}

}  // namespace
}  // namespace srformer::testing
