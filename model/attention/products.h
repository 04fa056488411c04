#pragma once
// The batched products of attention over [B, H, T, d] operands: q Kᵀ, p V and Kᵀ V. In an incremental
// decode step (one query per (row, head)) on the CPU in fp32 without autograd they run as kernels::
// loops over the B*H groups (LibTorch's bmm makes one BLAS call per group there); otherwise matmul.
#include <torch/types.h>

namespace srformer {

// q [B, H, Tq, d] · k [B, H, T, d]ᵀ -> [B, H, Tq, T]
torch::Tensor query_key_product(const torch::Tensor& q, const torch::Tensor& k);
// p [B, H, Tq, T] · v [B, H, T, d] -> [B, H, Tq, d]
torch::Tensor weights_value_product(const torch::Tensor& p, const torch::Tensor& v);
// k [B, H, T, d]ᵀ · v [B, H, T, d] -> [B, H, d, d]  (kernels for segments: T up to 512)
torch::Tensor keys_values_product(const torch::Tensor& k, const torch::Tensor& v);

}  // namespace srformer
