#include "model/kernels/rms_norm.h"

#include <cmath>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

namespace {

// Multiplies of x̂ = x * scale by the weight, in that order (as LibTorch's x * rsqrt(var) then w * y).
void scale_row_scalar(const float* x, int64_t dim, const float* weight, float scale, float* y) {
  for (int64_t j = 0; j < dim; ++j) y[j] = weight[j] * (x[j] * scale);
}

float mean_square_scalar(const float* x, int64_t dim) {
  float sum = 0.0F;
  for (int64_t j = 0; j < dim; ++j) sum += x[j] * x[j];
  return sum / static_cast<float>(dim);
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS
SRFORMER_AVX2 void norm_row_avx2(const float* x, int64_t dim, const float* weight, float eps, float* y) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    acc = _mm256_fmadd_ps(v, v, acc);
  }
  float sum = horizontal_sum(acc);
  for (; j < dim; ++j) sum += x[j] * x[j];
  const float scale = 1.0F / std::sqrt(sum / static_cast<float>(dim) + eps);
  const __m256 s = _mm256_set1_ps(scale);
  j = 0;
  for (; j + 8 <= dim; j += 8) {
    _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(weight + j), _mm256_mul_ps(_mm256_loadu_ps(x + j), s)));
  }
  scale_row_scalar(x + j, dim - j, weight + j, scale, y + j);
}
#endif

void norm_row(const float* x, int64_t dim, const float* weight, float eps, float* y) {
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  if (avx2_fma_available()) {
    norm_row_avx2(x, dim, weight, eps, y);
    return;
  }
#endif
  scale_row_scalar(x, dim, weight, 1.0F / std::sqrt(mean_square_scalar(x, dim) + eps), y);
}

}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t dim, const float* weight, float eps, float* y, int threads) {
  const bool parallel = threads > 1 && rows * dim >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t r = 0; r < rows; ++r) norm_row(x + r * dim, dim, weight, eps, y + r * dim);
}

}  // namespace srformer::kernels
