#pragma once
// A --device flag's value (cpu, cuda, cuda:N) as a torch::Device, or an error naming the flag's values.
#include <torch/types.h>

#include <stdexcept>
#include <string>

namespace srformer::tools {

inline torch::Device device_from_flag(const std::string& value) {
  try {
    const torch::Device device(value);
    if (device.is_cpu() || device.is_cuda()) return device;
  } catch (const std::exception&) {  // c10::Error for text LibTorch cannot read
  }
  throw std::invalid_argument("--device must be cpu, cuda or cuda:N, got '" + value + "'");
}

}  // namespace srformer::tools
