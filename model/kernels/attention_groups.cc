#include "model/kernels/attention_groups.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

void AttentionKeys::check(const AttentionShape& shape, const char* kernel) const {
  if (shape.batch != shape_.batch || shape.heads != shape_.heads || shape.keys != shape_.keys ||
      shape.head_dim != shape_.head_dim) {
    throw std::invalid_argument(std::string(kernel) + ": keys prepared for [" + std::to_string(shape_.batch) + ", " +
                                std::to_string(shape_.heads) + ", " + std::to_string(shape_.keys) + ", " +
                                std::to_string(shape_.head_dim) + "], not for this attention's [" +
                                std::to_string(shape.batch) + ", " + std::to_string(shape.heads) + ", " +
                                std::to_string(shape.keys) + ", " + std::to_string(shape.head_dim) + "]");
  }
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS

// Row i of the scores: add the bias, then the key mask, then softmax in place (max, Σ exp(s - max),
// scale by 1 / Σ).
SRFORMER_AVX2 void attention_softmax_row(float* s, const float* bias, const float* key_mask, int64_t n) {
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 vmax = ninf;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 x = _mm256_loadu_ps(s + j);
    if (bias != nullptr) x = _mm256_add_ps(x, _mm256_loadu_ps(bias + j));
    if (key_mask != nullptr) x = _mm256_add_ps(x, _mm256_loadu_ps(key_mask + j));
    _mm256_storeu_ps(s + j, x);
    vmax = _mm256_max_ps(vmax, x);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float best = *std::max_element(lanes, lanes + 8);
  for (; j < n; ++j) {
    if (bias != nullptr) s[j] += bias[j];
    if (key_mask != nullptr) s[j] += key_mask[j];
    best = std::max(best, s[j]);
  }
  if (best == -std::numeric_limits<float>::infinity()) {  // every key masked
    std::fill(s, s + n, 0.0F);
    return;
  }
  const __m256 vbest = _mm256_set1_ps(best);
  __m256 acc = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), vbest));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = horizontal_sum(acc);
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - best);
    sum += s[j];
  }
  const __m256 inv = _mm256_set1_ps(1.0F / sum);
  for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
  for (; j < n; ++j) s[j] *= 1.0F / sum;
}

#endif

}  // namespace srformer::kernels
