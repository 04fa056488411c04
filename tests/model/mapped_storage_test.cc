// Tensors over memory mappings of their own (model/mapped_storage.h): they grow and shrink in place
// keeping their contents, refuse what would pull memory from under another tensor, and give their
// pages back to the system.
#include "model/mapped_storage.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

#ifdef __linux__
#include <unistd.h>
#endif

namespace srformer {
namespace {

// Resident bytes of this process (Linux; -1 elsewhere).
int64_t resident_bytes() {
#ifdef __linux__
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = -1;
  statm >> size >> resident;
  return resident < 0 ? -1 : resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
#else
  return -1;
#endif
}

TEST(MappedStorage, GrowsAndShrinksKeepingContents) {
#ifndef __linux__
  GTEST_SKIP() << "mappings that grow need mremap (Linux)";
#endif
  auto t = mapped_empty(1200, torch::TensorOptions().dtype(torch::kFloat32));
  ASSERT_TRUE(is_mapped_storage(t));
  EXPECT_EQ(t.numel(), 1200);
  EXPECT_GE(t.storage().nbytes(), 1200 * sizeof(float));
  t.copy_(torch::arange(1200, torch::kFloat32));
  t.set_(t.storage(), 0, {12, 100}, {100, 1});  // a [rows, ...] view of the buffer, as the state keeps
  const auto expected = t.clone();

  ASSERT_TRUE(resize_mapped_storage(t, int64_t{4} << 20));  // 4 MiB: the pages move, nothing is copied
  EXPECT_TRUE(is_mapped_storage(t));
  EXPECT_EQ(t.storage().nbytes(), size_t{4} << 20);
  EXPECT_EQ(t.sizes(), expected.sizes());
  EXPECT_TRUE(torch::equal(t, expected));
  const auto all = torch::empty({0}, t.options()).set_(t.storage(), 0, {(int64_t{4} << 20) / 4}, {1});
  EXPECT_EQ(all.narrow(0, 1200, all.numel() - 1200).abs().max().item<float>(), 0.0f) << "new pages read as zero";
  EXPECT_FALSE(resize_mapped_storage(t, 4096)) << "a view of the storage exists: nothing may move under it";
  EXPECT_TRUE(torch::equal(all.narrow(0, 0, 1200).view({12, 100}), expected));

  auto alone = t.clone();  // a plain LibTorch tensor
  EXPECT_FALSE(is_mapped_storage(alone));
  EXPECT_FALSE(resize_mapped_storage(alone, 1 << 20));
  EXPECT_FALSE(resize_mapped_storage(t, 1200 * 4)) << "the view above still shares the storage";
}

TEST(MappedStorage, ShrinkingAndReleasingGiveThePagesBack) {
#ifndef __linux__
  GTEST_SKIP() << "mappings that grow need mremap (Linux)";
#endif
  constexpr int64_t kBytes = int64_t{256} << 20;
  const int64_t base = resident_bytes();
  auto t = mapped_empty(kBytes / 4, torch::TensorOptions().dtype(torch::kFloat32));
  EXPECT_LT(resident_bytes() - base, kBytes / 4) << "untouched pages are address space only";
  t.fill_(1.0f);
  EXPECT_GT(resident_bytes() - base, kBytes * 3 / 4);

  t.set_(t.storage(), 0, {1000}, {1});  // keep the first 1000 elements
  EXPECT_FALSE(resize_mapped_storage(t, 999 * 4)) << "smaller than the tensor's own elements";
  ASSERT_TRUE(resize_mapped_storage(t, 1000 * 4));
  EXPECT_LT(resident_bytes() - base, kBytes / 4) << "the pages past the tensor went back";
  EXPECT_EQ(t.sum().item<float>(), 1000.0f);

  ASSERT_TRUE(resize_mapped_storage(t, kBytes));
  t.set_(t.storage(), 0, {kBytes / 4}, {1});
  EXPECT_EQ(t.narrow(0, 0, 1000).sum().item<float>(), 1000.0f) << "grown back: the kept elements are there";
  t.fill_(2.0f);
  EXPECT_GT(resident_bytes() - base, kBytes * 3 / 4);
  t = torch::Tensor();
  EXPECT_LT(resident_bytes() - base, kBytes / 4) << "a released tensor unmaps its pages";
}

}  // namespace
}  // namespace srformer
