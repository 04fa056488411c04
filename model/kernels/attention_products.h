#pragma once
// The small batched products of one decode step's attention, for G independent (row, head) groups:
// scores = q Kᵀ and out = p V for one query per group, and K_iᵀ V_i over a segment (the SRformer
// update). LibTorch's CPU bmm makes one BLAS call per group at these shapes (1 x d times d x T): ~1.8
// ms for a batch of 8 BART rows, where these loops take tens of microseconds. Every group is
// computed the same way whatever G is.
// Plain C++ (no LibTorch); fast only where kernels::avx2_fma_available().
#include <cstdint>

namespace srformer::kernels {

// scores[g*T + t] = Σ_j q[g*d + j] k[g*k_stride + t*d + j]  (q: [G, d]; group g of k: [T, d] at
// g*k_stride, k_stride >= T*d: a cache with room for more rows)
void query_key_scores(const float* q, const float* k, int64_t k_stride, int64_t groups, int64_t T, int64_t d,
                      float* scores, int threads);

// out[g*d + j] = Σ_t p[g*T + t] v[g*v_stride + t*d + j]  (p: [G, T]; group g of v: [T, d] at g*v_stride)
void weighted_value_sum(const float* p, const float* v, int64_t v_stride, int64_t groups, int64_t T, int64_t d,
                        float* out, int threads);

// out[(g*d + a)*d + j] = Σ_t k[(g*T + t)*d + a] v[(g*T + t)*d + j]  (kᵀ v per group: [G, d, d])
void key_value_outer_sum(const float* k, const float* v, int64_t groups, int64_t T, int64_t d, float* out, int threads);

}  // namespace srformer::kernels
