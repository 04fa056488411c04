#pragma once
// y = x Wᵀ + b for a few rows of x (a decode step: one row per sequence in the batch), reading each
// weight once. OpenBLAS 0.3.21's sgemm packs all of W on every call, so a step of 8 rows costs ~6x a
// step of one row although both are bound by reading W. This kernel streams W once for all rows.
//
// Each output y[r][o] is accumulated in the same order whatever the number of rows, so a sequence's
// projections are bit-identical alone or inside any batch.
// Plain C++ (no LibTorch); fast only where kernels::avx2_fma_available(), callers use BLAS elsewhere.
#include <cstdint>

namespace srformer::kernels {

// y[r * out + o] = Σ_j x[r * in + j] w[o * in + j] + bias[o]: x is [rows, in] row-major, w is [out, in]
// row-major, bias is [out] or null. Splits the output features over `threads` OpenMP threads (the
// intra-op pool LibTorch uses).
void few_rows_linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias, float* y,
                     int threads);

}  // namespace srformer::kernels
