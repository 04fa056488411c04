#pragma once
// Multi-head self-attention with an incremental (cached) form. Position information (T5's
// relative bias) and masks arrive as one additive bias, so BART and T5 share the module.
#include <torch/types.h>

#include <functional>

#include "model/layers.h"

namespace srformer {

// An additive bias that depends only on key − query position (T5's relative-position bias), held as
// its diagonals: diagonals [H|1, Tq + T − 1], element (h, j − i + Tq − 1) for query i and key j. The
// CPU attention kernels read it in place, O(Tq + T) memory where the dense form is O(Tq · T) per head
// (16k tokens, 8 heads: 8 GiB); the other paths build the dense form.
struct DiagonalBias {
  torch::Tensor diagonals;
  int64_t queries = 0;
  torch::Tensor dense() const;  // [1, H, Tq, T]
};

struct SelfAttention {
  Linear q, k, v, o;
  int64_t heads = 0;
  double scale = 1.0;  // BART: head_dim^-0.5 on the query; T5: 1
  // Encoder layers under `--dtype bf16` on the CPU: forward() multiplies q kᵀ and p v in bfloat16
  // (kernels/bf16_attention.h: AMX or AVX512-BF16) when autograd does not track them. Not for the
  // decoder, whose teacher-forced and incremental forms must agree.
  bool bf16_attention = false;
  // Encoder layers in fp32 on the CPU: forward() runs softmax(q kᵀ) v in our kernel
  // (kernels/fp32_attention.h) when autograd does not track it, the CPU kernels are on and the CPU
  // has AVX2 + FMA. Not for the decoder, for the same reason as above.
  bool kernel_attention = false;

  // x [B,T,D]; bias additive, broadcastable to [B,H,T,T] (masks and position bias); key_mask (optional)
  // a second additive term, broadcastable to [B,1,1,T]: T5's encoder passes its [1,H,T,T] position bias
  // and its [B,1,1,T] padding mask apart, so that their [B,H,T,T] sum is never built. Returns [B,T,D].
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias, const torch::Tensor& key_mask = {}) const;
  // Same with a bias given by its diagonals (T5's encoder).
  torch::Tensor forward(const torch::Tensor& x, const DiagonalBias& bias, const torch::Tensor& key_mask = {}) const;
  // The same in pieces, calling between() between any two: the keys' projection, then the values', by
  // blocks of `positions` positions (project_heads), then blocks of `queries` query positions, each with
  // its queries, scores and output. Each query's result is the one forward() gives (attention rows are
  // independent); a long input's sublayer becomes pieces a caller can pause between (T5's encoder at
  // 16k tokens: seconds whole).
  torch::Tensor forward_in_pieces(const torch::Tensor& x, const DiagonalBias& bias, const torch::Tensor& key_mask,
                                  int64_t queries, int64_t positions, const std::function<void()>& between) const;
  // Same, also returning the keys/values [B,H,T,d] to seed a cache.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor* keys, torch::Tensor* values,
                        const torch::Tensor& key_mask = {}) const;
  // One new position per row: x [B,1,D]. Appends its key/value to cache_k/cache_v ([B,H,T,d] ->
  // [B,H,T+1,d]) and attends over all slots with bias [B,H|1,1,T+1]. Returns [B,1,D].
  // slot_rows (optional, [B, T+1] int32 CPU, DecoderState::self_src): the cache row holding each
  // slot of each row; then the CPU kernel (kernels::slot_attention) reads the slots where they lie.
  torch::Tensor step(const torch::Tensor& x, torch::Tensor& cache_k, torch::Tensor& cache_v, const torch::Tensor& bias,
                     const torch::Tensor& slot_rows = {}) const;
};

// softmax(q k^T + bias + key_mask) v with the softmax in fp32 (as Hugging Face does for half
// precision); key_mask is optional (see SelfAttention::forward).
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& bias,
                     const torch::Tensor& key_mask = {});

// attend() with both products in bfloat16 (AMX or AVX512-BF16) and the softmax in fp32, one (row,
// head) group at a time; q [B,H,Tq,d], k/v [B,H,T,d] CPU float32 (read in place when rows are dense),
// bias broadcastable to [B,H,Tq,T] or undefined. The result is a [B,H,Tq,d] view of a [B,Tq,H,d] tensor.
torch::Tensor attend_bf16(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& bias, const torch::Tensor& key_mask = {});

// attend() in fp32 with our kernel (kernels/fp32_attention.h), same operands and result layout as
// attend_bf16; where kernels::fp32_attention_available().
torch::Tensor attend_fp32_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& bias, const torch::Tensor& key_mask = {});

// One decode step's softmax(q kᵀ + bias) v (q [B,H,1,d]) over caches [B',H,T,d] whose slot t of row b
// lies in row slot_rows[b, t] (int32 [B, T]), with kernels::slot_attention; CPU float32 operands.
torch::Tensor attend_slots(const torch::Tensor& q, const torch::Tensor& cache_k, const torch::Tensor& cache_v,
                           const torch::Tensor& slot_rows, const torch::Tensor& bias);

// Additive mask value: -inf where `allowed` is false, 0 elsewhere, in dtype.
torch::Tensor additive_mask(const torch::Tensor& allowed, torch::ScalarType dtype);

// A self-attention cache written one slot per step lives in a buffer with room: when full at `slots`
// slots it grows to grown_cache_capacity(slots). cache_capacity(n): the most slots a cache of n slots
// holds, room included (it grew one slot ago, from a buffer made dense or full): what a row's cache
// costs at most (state_footprint.h).
int64_t grown_cache_capacity(int64_t slots);
int64_t cache_capacity(int64_t slots);

}  // namespace srformer
