#include "model/cuda_device.h"

#include <torch/cuda.h>

#include "model/config.h"
#include "model/seq2seq.h"

#if defined(SRFORMER_TORCH_CUDA)  // set by cmake/Dependencies.cmake for a CUDA LibTorch
#include <cuda_runtime_api.h>
#endif

namespace srformer {

bool cuda_has_bf16(int device) {
#if defined(SRFORMER_TORCH_CUDA)
  if (device < 0 || device >= static_cast<int>(torch::cuda::device_count())) return false;
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess && major >= 8;
#else
  (void)device;
  return false;
#endif
}

torch::ScalarType default_dtype_for(const std::filesystem::path& model_dir, const torch::Device& device) {
  if (!device.is_cuda()) return torch::kFloat32;
  const int index = device.has_index() ? device.index() : 0;
  return default_dtype(ModelConfig::load(model_dir / "config.json"), device, cuda_has_bf16(index));
}

}  // namespace srformer
