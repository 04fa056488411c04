#pragma once
// What a CUDA device offers, asked of the driver, and the dtype a model runs in there by default. Without
// a CUDA LibTorch (Debian's) every answer is "none".
#include <torch/types.h>

#include <filesystem>

namespace srformer {

// CUDA device `device` computes in bfloat16 natively (compute capability 8.0 or newer: A100, H100, RTX 30xx
// on). false without CUDA or when the driver cannot say.
bool cuda_has_bf16(int device);

// default_dtype (seq2seq.h) for the model in `model_dir` on `device`, asking a CUDA device whether it has
// bfloat16: what the server, `srformer summarize` and `srformer eval` load in when --dtype is not given.
torch::ScalarType default_dtype_for(const std::filesystem::path& model_dir, const torch::Device& device);

}  // namespace srformer
