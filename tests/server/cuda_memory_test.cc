// The CUDA caching-allocator source behind srformer_torch_cuda_{allocated,reserved}_bytes: on a
// CUDA machine it reports every device and follows an allocation; without CUDA it reports nothing.
#include "server/engine/cuda_memory.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace srformer::server {
namespace {

TEST(TorchCudaMemory, FollowsAnAllocationOrIsEmptyWithoutCuda) {
  if (!torch::cuda::is_available()) {
    EXPECT_TRUE(torch_cuda_memory().empty());
    GTEST_SKIP() << "no CUDA device: only the empty reading was checked (run on a GPU machine: deploy/gpu/)";
  }
  const auto before = torch_cuda_memory();
  ASSERT_EQ(static_cast<int64_t>(before.size()), static_cast<int64_t>(torch::cuda::device_count()));
  const auto block = torch::empty({64, 1024, 1024}, torch::TensorOptions().device(torch::kCUDA, 0));  // 256 MiB
  const auto after = torch_cuda_memory();
  EXPECT_EQ(after[0].device, 0);
  EXPECT_GE(after[0].allocated_bytes - before[0].allocated_bytes, 256.0 * 1024 * 1024);
  EXPECT_GE(after[0].reserved_bytes, after[0].allocated_bytes);
}

// What --max-state-memory auto halves on a CUDA device.
TEST(TorchCudaMemory, FreeBytesFallWithAnAllocationOrAreUnknownWithoutCuda) {
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(cuda_free_bytes(0), std::nullopt);
    GTEST_SKIP() << "no CUDA device: only the missing reading was checked (run on a GPU machine: deploy/gpu/)";
  }
  const auto before = cuda_free_bytes(0);
  ASSERT_TRUE(before.has_value());
  EXPECT_GT(*before, 0);
  EXPECT_EQ(cuda_free_bytes(static_cast<int>(torch::cuda::device_count())), std::nullopt);
  const auto block = torch::empty({256, 1024, 1024}, torch::TensorOptions().device(torch::kCUDA, 0));  // 1 GiB
  const auto after = cuda_free_bytes(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_LE(*after, *before - (int64_t{1} << 30) + (int64_t{64} << 20));  // the allocator may round up, not down
}

}  // namespace
}  // namespace srformer::server
