#include "server/engine/cuda_memory.h"

#include <torch/cuda.h>

#if defined(SRFORMER_TORCH_CUDA)  // set by cmake/Dependencies.cmake for a CUDA LibTorch
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#endif

namespace srformer::server {

std::vector<TorchCudaMemory> torch_cuda_memory() {
  std::vector<TorchCudaMemory> out;
#if defined(SRFORMER_TORCH_CUDA)
  const auto devices = static_cast<int>(torch::cuda::device_count());
  for (int d = 0; d < devices; ++d) {
    try {
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(d));
      // Index 0 is StatType::AGGREGATE (all pools); the enum moved namespaces between LibTorch 1.13 and 2.x.
      out.push_back({d, static_cast<double>(stats.allocated_bytes[0].current),
                     static_cast<double>(stats.reserved_bytes[0].current)});
    } catch (const c10::Error&) {
      // LibTorch 2.x sets its caching allocator up on the first CUDA allocation and refuses statistics
      // before it ("Invalid device argument", seen on the first GPU run). Until then it holds nothing.
      out.push_back({d, 0.0, 0.0});
    }
  }
#endif
  return out;
}

std::optional<int64_t> cuda_free_bytes(int device) {
#if defined(SRFORMER_TORCH_CUDA)
  if (device < 0 || device >= static_cast<int>(torch::cuda::device_count())) return std::nullopt;
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return std::nullopt;
  return static_cast<int64_t>(free);
#else
  (void)device;
  return std::nullopt;
#endif
}

}  // namespace srformer::server
