#pragma once
// A --device flag's value (cpu, cuda, cuda:N) as a torch::Device, or an error naming the flag's values.
#include <torch/types.h>

#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

namespace srformer::tools {

inline torch::Device device_from_flag(const std::string& value) {
  std::optional<torch::Device> device;
  try {
    device.emplace(value);
  } catch (const std::exception&) {  // c10::Error for text LibTorch cannot read
  }
  if (!device || !(device->is_cpu() || device->is_cuda())) {
    throw std::invalid_argument("--device must be cpu, cuda or cuda:N, got '" + value + "'");
  }
  // LibTorch keeps the index in 8 bits: cuda:300 read as cuda:44 and cuda:256 as cuda:0, another GPU
  // (srformer-server refuses them as well).
  if (device->str() != value) {
    throw std::invalid_argument("--device cuda:N takes N from 0 to " +
                                std::to_string(std::numeric_limits<c10::DeviceIndex>::max()) + ", got '" + value + "'");
  }
  return *device;
}

}  // namespace srformer::tools
