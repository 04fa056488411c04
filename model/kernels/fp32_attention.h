#pragma once
// softmax(q kᵀ + bias) v in fp32 for every (row, head) group, with outer-product blocks (AVX-512, or
// AVX2 where the CPU lacks it or SRFORMER_CPU_AVX512=0: the same bits either way): the
// encoder's self-attention on the CPU under `--dtype fp32` (and any other self-attention autograd does
// not track). LibTorch's batched matmuls run these products (inner size d = 64, or T) through
// OpenBLAS at a fraction of its speed and materialise [B, H, Tq, T] scores several times over; here,
// as in bf16_attention (same shapes, layouts and bias), the scores of a block of queries live in a
// per-thread buffer. Both products sum their terms in order (q·k over the head dimension, p·v over
// the keys), so a group's result does not depend on the other groups of the batch. Padding keys
// (masked) change only the softmax's summation order. Plain C++ (no LibTorch). Use only where
// fp32_attention_available().
#include <cstdint>
#include <memory>

#include "model/kernels/bf16_attention.h"  // AttentionShape, AttentionBias, HeadLayout

namespace srformer::kernels {

// AVX2 + FMA on this CPU.
bool fp32_attention_available();

// q [B, H, Tq, d], k and v [B, H, T, d], out [B, H, Tq, d] in the given layouts; groups split over
// `threads` OpenMP threads. A query whose keys are all masked gets zeros.
void fp32_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads);

// kᵀ prepared once, for fp32_attention over any block of queries. v is read in place by every such
// call: it must stay unchanged and alive while they run.
std::unique_ptr<const AttentionKeys> fp32_attention_keys(const float* k, HeadLayout k_layout, const float* v,
                                                         HeadLayout v_layout, const AttentionShape& shape, int threads);
// The same as above over keys from fp32_attention_keys() for this shape.
void fp32_attention(const float* q, HeadLayout q_layout, const AttentionKeys& keys, const AttentionBias& bias,
                    float* out, HeadLayout out_layout, const AttentionShape& shape, int threads);

}  // namespace srformer::kernels
