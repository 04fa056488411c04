#pragma once
// The small batched products of one decode step's attention, for G independent (row, head) groups:
// scores = q Kᵀ and out = p V for one query per group, and K_iᵀ V_i over a segment (the SRformer
// update). LibTorch's CPU bmm makes one BLAS call per group at these shapes (1 x d times d x T): ~1.8
// ms for a batch of 8 BART rows, where these loops take tens of microseconds. Every group is
// computed the same way whatever G is.
// Plain C++ (no LibTorch); fast only where kernels::avx2_fma_available().
#include <cstdint>

#include "model/kernels/bf16_attention.h"  // AttentionBias, HeadLayout

namespace srformer::kernels {

// scores[g*T + t] = Σ_j q[g*d + j] k[g*k_stride + t*d + j]  (q: [G, d]; group g of k: [T, d] at
// g*k_stride, k_stride >= T*d: a cache with room for more rows)
void query_key_scores(const float* q, const float* k, int64_t k_stride, int64_t groups, int64_t T, int64_t d,
                      float* scores, int threads);

// out[g*d + j] = Σ_t p[g*T + t] v[g*v_stride + t*d + j]  (p: [G, T]; group g of v: [T, d] at g*v_stride)
void weighted_value_sum(const float* p, const float* v, int64_t v_stride, int64_t groups, int64_t T, int64_t d,
                        float* out, int threads);

// Each of `rows` rows of n scores into probabilities, in place: softmax as attention_groups.h's
// attention_softmax_row computes it (a row's bits do not depend on masked keys after its own).
void softmax_rows(float* scores, int64_t rows, int64_t n);

struct SlotAttentionShape {
  int64_t batch = 0, heads = 0;
  int64_t slots = 0;  // T
  int64_t head_dim = 0;
};

// One decode step of self-attention over caches whose slots may lie in other rows: for every (row b,
// head h), softmax(q kᵀ + bias) v over T slots, slot t read from row slot_rows[b * slot_rows_stride + t]
// of the caches (null: row b). Beams of one request share the slots they have in common
// (DecoderState::self_src), so a beam changing parents changes that table, not the caches.
// q and out [B, H, 1, d] in their layouts (row stride unused); k and v [B', H, T', d] in layout
// `cache` (T' ≥ T, rows d floats apart); bias as in bf16_attention (q_stride unused). The products are
// query_key_scores' and weighted_value_sum's, the softmax the attention kernels' (attention_groups.h).
void slot_attention(const float* q, HeadLayout q_layout, const float* k, const float* v, HeadLayout cache,
                    const int32_t* slot_rows, int64_t slot_rows_stride, const AttentionBias& bias, float* out,
                    HeadLayout out_layout, const SlotAttentionShape& shape, int threads);

struct WindowAttentionShape {
  int64_t batch = 0, heads = 0, head_dim = 0;
};

// One decode step of cross-attention over a window of consecutive keys read where they lie: for
// every (row b, head h), softmax(q kᵀ) v over keys [first[b], first[b] + count[b]) of row rows[b]
// of k and v ([R, H, k, d] in layout `kv`, keys d floats long); a row with no keys gets zeros. A
// segmented softmax's window (or full attention's whole input) is such a range of the request's span of
// the head-major cross keys/values pools ([H, N, d]: `rows` the spans' starts, the layout's batch and
// key strides both the position stride d, its head stride the pool's; LayerState::cross_start), so no
// per-row copy of the window is needed. Callers check the ranges.
// q and out [B, H, 1, d] in their layouts (row stride unused).
void window_attention(const float* q, HeadLayout q_layout, const float* k, const float* v, HeadLayout kv,
                      const int64_t* rows, const int64_t* first, const int64_t* count, float* out,
                      HeadLayout out_layout, const WindowAttentionShape& shape, int threads);

// out[(g*d + a)*d + j] = Σ_t k[(g*T + t)*d + a] v[(g*T + t)*d + j]  (kᵀ v per group: [G, d, d])
void key_value_outer_sum(const float* k, const float* v, int64_t groups, int64_t T, int64_t d, float* out, int threads);

}  // namespace srformer::kernels
