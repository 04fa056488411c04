#pragma once
// The safetensors dtype codes we read and write, and their LibTorch equivalents.
#include <torch/types.h>

#include <cstddef>
#include <optional>
#include <string>

namespace srformer {

struct SafetensorsDtype {
  const char* code;  // "F32", "BF16", ...
  torch::ScalarType scalar_type;
  size_t element_size;  // bytes
};

// nullopt for codes we do not know or LibTorch cannot hold (U16, F8_*, ...).
std::optional<SafetensorsDtype> safetensors_dtype(const std::string& code);
std::optional<SafetensorsDtype> safetensors_dtype(torch::ScalarType scalar_type);
// "F32, F16, ..." for error messages.
std::string supported_safetensors_dtypes();

}  // namespace srformer
