#include "model/dtype_name.h"

namespace srformer {

std::optional<torch::ScalarType> float_dtype_from_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return torch::kFloat32;
  if (name == "fp16" || name == "float16") return torch::kFloat16;
  if (name == "bf16" || name == "bfloat16") return torch::kBFloat16;
  return std::nullopt;
}

}  // namespace srformer
