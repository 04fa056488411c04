#include "model/dtype_name.h"

#include <stdexcept>

#include "model/kernels/bf16_linear.h"

namespace srformer {

std::optional<torch::ScalarType> float_dtype_from_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return torch::kFloat32;
  if (name == "fp16" || name == "float16") return torch::kFloat16;
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  return std::nullopt;
}

torch::ScalarType float_dtype_from_flag(const std::string& value) {
  const auto t = float_dtype_from_name(value);
  if (!t) throw std::invalid_argument("--dtype takes fp32, fp16 or bf16, not '" + value + "'");
  return *t;
}

std::string dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat16:
      return "fp16";
    case torch::kBFloat16:
      return "bf16";
    case torch::kFloat32:
      return "fp32";
    default:
      return c10::toString(dtype);
  }
}

std::string compute_name(const torch::Device& device, torch::ScalarType dtype) {
  if (device.is_cpu() && dtype == torch::kBFloat16) return "bf16 (" + std::string(kernels::cpu_bf16_backend()) + ")";
  return dtype_name(dtype);
}

}  // namespace srformer
