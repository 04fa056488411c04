#pragma once
// The names users write for floating-point dtypes in --dtype flags (server, srformer convert).
#include <torch/types.h>

#include <optional>
#include <string>

namespace srformer {

// fp32/float32, fp16/float16, bf16/bfloat16; nullopt for anything else.
std::optional<torch::ScalarType> float_dtype_from_name(const std::string& name);
// As float_dtype_from_name, for a --dtype flag: std::invalid_argument naming the accepted values otherwise.
torch::ScalarType float_dtype_from_flag(const std::string& value);
// The short name: fp32, fp16, bf16 (LibTorch's name for any other type).
std::string dtype_name(torch::ScalarType dtype);
// dtype_name, plus what multiplies where that is worth a log line: "bf16 (amx)" or "bf16 (avx512-bf16)"
// for bf16 on the CPU (kernels/bf16_linear.h).
std::string compute_name(const torch::Device& device, torch::ScalarType dtype);

}  // namespace srformer
