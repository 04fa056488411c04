#pragma once
// LibTorch's CUDA caching-allocator readings for the metrics (srformer_torch_cuda_*_bytes).
#include <vector>

#include "server/metrics/metrics.h"

namespace srformer::server {

// Allocated and reserved bytes per visible CUDA device. Empty when LibTorch was built without CUDA
// (Debian's) or no device is visible.
std::vector<TorchCudaMemory> torch_cuda_memory();

}  // namespace srformer::server
