// Beside the LibTorch we were built with, std::filesystem code is libstdc++'s own. PyTorch's wheels
// export a copy of part of it (pytorch/pytorch#133437); cmake/Dependencies.cmake links libstdc++ first so
// that copy serves no one. With Debian's LibTorch, which exports none, this holds without the flag:
// tests/link/ is the check that fails here when the flag is lost. On a GPU machine (PyTorch's LibTorch)
// this is the check of the real thing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "tests/support/std_symbol_owner.h"
#include "tests/support/temp_dir.h"

namespace srformer::testing {
namespace {

TEST(LinkOrder, LibstdcxxServesItsOwnFilesystemCodeBesideLibTorch) {
  // Use LibTorch, so that its libraries are certainly loaded whatever the linker kept.
  EXPECT_EQ(torch::ones({2}).sum().item<float>(), 2.0F);
  EXPECT_NE(symbol_owner(kRecursiveDirectoryIteratorCtor).find("libstdc++"), std::string::npos)
      << "std::filesystem code bound to " << symbol_owner(kRecursiveDirectoryIteratorCtor);
  const TempDir dir("link-order");
  std::filesystem::create_directories(dir.path() / "inner");
  std::ofstream(dir.path() / "inner" / "file") << "x";
  EXPECT_EQ(std::filesystem::remove_all(dir.path() / "inner"), 2U);
}

}  // namespace
}  // namespace srformer::testing
