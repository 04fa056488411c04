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
// k [B, H, T, d]ᵀ · v [B, H, T, d] -> [B, H, d, d] (the kernel at any T: padding changes no bits)
torch::Tensor keys_values_product(const torch::Tensor& k, const torch::Tensor& v);

// ||K|| over positions: k [B, H, T, d] -> [B, H, d]. On the CPU in fp32 without autograd each norm is
// one sum over t = 0, 1, ... from zero, so a row's zero-padded positions change no bits (LibTorch's
// reduction groups its terms by the padded length: a row padded beside a longer one got other bits).
torch::Tensor key_norms(const torch::Tensor& k);

// softmax over the last dimension. In a decode step's shape ([B, H, 1, T], CPU fp32, no autograd) each
// row runs kernels::attention_softmax_row, whose bits do not change when masked keys follow the row's own
// (a batch whose other rows read more keys); LibTorch's softmax sums a row of fewer than 16 scores in
// another order than a longer one, so a row's probabilities depended on its batch.
torch::Tensor softmax_last_dim(const torch::Tensor& scores);

// t [B, H, T, d] as B*H groups of T dense rows of d, each group at one stride (>= T*d) from the
// last: that stride, else 0. A self-attention cache is such a view of a buffer with room for more.
int64_t uniform_group_stride(const torch::Tensor& t);

}  // namespace srformer
