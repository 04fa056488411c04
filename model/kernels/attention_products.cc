#include "model/kernels/attention_products.h"

#include <algorithm>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

SRFORMER_AVX2 float dot(const float* a, const float* b, int64_t d) {
  __m256 acc = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 8 <= d; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
  float s = horizontal_sum(acc);
  for (; j < d; ++j) s += a[j] * b[j];
  return s;
}

SRFORMER_AVX2 void scores_group(const float* q, const float* k, int64_t T, int64_t d, float* scores) {
  for (int64_t t = 0; t < T; ++t) scores[t] = dot(q, k + t * d, d);
}

// out = Σ_t p[t * p_stride] v[t, :]. Eight vectors of the output (64 floats) stay in registers while
// all T rows of v stream past.
SRFORMER_AVX2 void sum_group(const float* p, int64_t p_stride, const float* v, int64_t T, int64_t d, float* out) {
  constexpr int64_t kWidth = 64;
  int64_t j0 = 0;
  for (; j0 + kWidth <= d; j0 += kWidth) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t t = 0; t < T; ++t) {
      const __m256 pt = _mm256_set1_ps(p[t * p_stride]);
      const float* row = v + t * d + j0;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(row + 8 * c), acc[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + j0 + 8 * c, acc[c]);
  }
  for (; j0 + 8 <= d; j0 += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t t = 0; t < T; ++t) {
      acc = _mm256_fmadd_ps(_mm256_set1_ps(p[t * p_stride]), _mm256_loadu_ps(v + t * d + j0), acc);
    }
    _mm256_storeu_ps(out + j0, acc);
  }
  for (; j0 < d; ++j0) {
    float s = 0.0F;
    for (int64_t t = 0; t < T; ++t) s += p[t * p_stride] * v[t * d + j0];
    out[j0] = s;
  }
}

}  // namespace

void query_key_scores(const float* q, const float* k, int64_t k_stride, int64_t groups, int64_t T, int64_t d,
                      float* scores, int threads) {
  const bool parallel = threads > 1 && groups * T * d >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t g = 0; g < groups; ++g) scores_group(q + g * d, k + g * k_stride, T, d, scores + g * T);
}

void weighted_value_sum(const float* p, const float* v, int64_t v_stride, int64_t groups, int64_t T, int64_t d,
                        float* out, int threads) {
  const bool parallel = threads > 1 && groups * T * d >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t g = 0; g < groups; ++g) sum_group(p + g * T, 1, v + g * v_stride, T, d, out + g * d);
}

void key_value_outer_sum(const float* k, const float* v, int64_t groups, int64_t T, int64_t d, float* out,
                         int threads) {
  const bool parallel = threads > 1 && groups * T * d * d >= kParallelMinWork;
  (void)parallel;
  // Row a of kᵀ v is Σ_t k[t, a] v[t, :]: a weighted sum of v's rows with k's column a as weights.
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t ga = 0; ga < groups * d; ++ga) {
    const int64_t g = ga / d;
    const int64_t a = ga % d;
    sum_group(k + g * T * d + a, d, v + g * T * d, T, d, out + ga * d);
  }
}

#else  // not x86-64: callers use LibTorch; these plain loops only keep the functions correct

void query_key_scores(const float* q, const float* k, int64_t k_stride, int64_t groups, int64_t T, int64_t d,
                      float* scores, int /*threads*/) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < T; ++t) {
      float s = 0.0F;
      for (int64_t j = 0; j < d; ++j) s += q[g * d + j] * k[g * k_stride + t * d + j];
      scores[g * T + t] = s;
    }
  }
}

void weighted_value_sum(const float* p, const float* v, int64_t v_stride, int64_t groups, int64_t T, int64_t d,
                        float* out, int /*threads*/) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < d; ++j) {
      float s = 0.0F;
      for (int64_t t = 0; t < T; ++t) s += p[g * T + t] * v[g * v_stride + t * d + j];
      out[g * d + j] = s;
    }
  }
}

void key_value_outer_sum(const float* k, const float* v, int64_t groups, int64_t T, int64_t d, float* out,
                         int /*threads*/) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t a = 0; a < d; ++a) {
      for (int64_t j = 0; j < d; ++j) {
        float s = 0.0F;
        for (int64_t t = 0; t < T; ++t) s += k[(g * T + t) * d + a] * v[(g * T + t) * d + j];
        out[(g * d + a) * d + j] = s;
      }
    }
  }
}

#endif

}  // namespace srformer::kernels
