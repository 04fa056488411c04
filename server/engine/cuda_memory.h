#pragma once
// LibTorch's CUDA caching-allocator readings for the metrics (srformer_torch_cuda_*_bytes).
#include <cstdint>
#include <optional>
#include <vector>

#include "server/metrics/metrics.h"

namespace srformer::server {

// Allocated and reserved bytes per visible CUDA device. Empty when LibTorch was built without CUDA
// (Debian's) or no device is visible.
std::vector<TorchCudaMemory> torch_cuda_memory();

// Bytes free on CUDA device `device` (the driver's count: what neither this process's allocator nor
// any other process holds). nullopt without CUDA or when the driver cannot say.
std::optional<int64_t> cuda_free_bytes(int device);

}  // namespace srformer::server
