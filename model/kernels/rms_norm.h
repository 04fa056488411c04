#pragma once
// T5's layer norm over rows of x: y = w * (x / sqrt(mean(x²) + eps)), the mean in fp32. LibTorch
// spends five ops on it (square, mean, add, rsqrt, two products), each a pass over x and, at a decode
// step's few rows, mostly dispatch (~1 ms of a 9 ms T5-small step); here it is one pass per row.
// Each row is computed alone, the same way whatever the number of rows.
// Plain C++ (no LibTorch); vectorised where kernels::avx2_fma_available().
#include <cstdint>

namespace srformer::kernels {

// x, y: [rows, dim] row-major (y may be x); weight: [dim]. Rows split over `threads` OpenMP threads.
void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y, int threads);

}  // namespace srformer::kernels
