#pragma once
// The AVX-512 form of kernels::few_rows_linear, which calls it when kernels::use_avx512().
#include <cstdint>

namespace srformer::kernels {

void few_rows_linear_avx512(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias,
                            float* y, int threads);

}  // namespace srformer::kernels
