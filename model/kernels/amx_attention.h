#pragma once
// softmax(q kᵀ + bias) v for every (row, head) group with both products on AMX tiles in bfloat16
// (fp32 sums) and the softmax in fp32: the encoder's self-attention under `--dtype bf16` on the CPU.
// One group at a time per thread, so the [Tq, T] scores live in a per-thread buffer instead of a
// [B, H, Tq, T] tensor (256 MB per layer for 8 rows of 1024 tokens, page-faulted in afresh each time).
// A group's result depends only on its own operands: batching and padding (masked keys) change nothing.
// Plain C++ (no LibTorch). Use only where amx_available().
#include <cstdint>

namespace srformer::kernels {

struct AttentionShape {
  int64_t batch = 0, heads = 0;
  int64_t queries = 0;  // Tq
  int64_t keys = 0;     // T
  int64_t head_dim = 0;
};

// Additive bias, broadcast like LibTorch: element (b, h, i, j) at data[b * b_stride + h * h_stride +
// i * q_stride + j] (a stride of 0 repeats). -inf masks a key; a query with every key masked gets zeros.
struct AttentionBias {
  const float* data = nullptr;  // null: no bias
  int64_t b_stride = 0, h_stride = 0, q_stride = 0;
};

// q [B, H, Tq, d], k and v [B, H, T, d], out [B, H, Tq, d], all contiguous; groups split over
// `threads` OpenMP threads.
void amx_attention(const float* q, const float* k, const float* v, const AttentionBias& bias, float* out,
                   const AttentionShape& shape, int threads);

}  // namespace srformer::kernels
