#pragma once
// The names users write for floating-point dtypes in --dtype flags (server, srformer convert).
#include <torch/types.h>

#include <optional>
#include <string>

namespace srformer {

// fp32/float32, fp16/float16, bf16/bfloat16; nullopt for anything else.
std::optional<torch::ScalarType> float_dtype_from_name(const std::string& name);

}  // namespace srformer
