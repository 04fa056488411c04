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
// scale by 1 / Σ). The last partial block goes through the same vector code, its missing keys read as
// -inf (exp 0): key j always lands in lane j % 8 of block j / 8, so keys appended behind a row's real
// ones, masked (padding), leave every result bit as it is. An encoder row then gives the same output
// padded inside a batch as alone, and a request's summary does not depend on whom it was batched with.
SRFORMER_AVX2 void attention_softmax_row(float* s, const float* bias, const float* key_mask, int64_t n) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t whole = n / 8 * 8;
  const int64_t tail = n - whole;
  // The tail's scores (bias and mask added) in a block of 8, -inf past n.
  alignas(32) float last[8];
  std::fill(last, last + 8, kNegInf);
  for (int64_t j = 0; j < tail; ++j) {
    float x = s[whole + j];
    if (bias != nullptr) x += bias[whole + j];
    if (key_mask != nullptr) x += key_mask[whole + j];
    last[j] = x;
  }
  __m256 vmax = _mm256_load_ps(last);
  for (int64_t j = 0; j < whole; j += 8) {
    __m256 x = _mm256_loadu_ps(s + j);
    if (bias != nullptr) x = _mm256_add_ps(x, _mm256_loadu_ps(bias + j));
    if (key_mask != nullptr) x = _mm256_add_ps(x, _mm256_loadu_ps(key_mask + j));
    _mm256_storeu_ps(s + j, x);
    vmax = _mm256_max_ps(vmax, x);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  const float best = *std::max_element(lanes, lanes + 8);
  if (best == kNegInf) {  // every key masked
    std::fill(s, s + n, 0.0F);
    return;
  }
  const __m256 vbest = _mm256_set1_ps(best);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t j = 0; j < whole; j += 8) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(s + j), vbest));
    _mm256_storeu_ps(s + j, e);
    acc = _mm256_add_ps(acc, e);
  }
  if (tail > 0) {
    const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_load_ps(last), vbest));
    _mm256_store_ps(last, e);
    acc = _mm256_add_ps(acc, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0F / horizontal_sum(acc));
  for (int64_t j = 0; j < whole; j += 8) _mm256_storeu_ps(s + j, _mm256_mul_ps(_mm256_loadu_ps(s + j), inv));
  if (tail > 0) {
    _mm256_store_ps(last, _mm256_mul_ps(_mm256_load_ps(last), inv));
    std::copy(last, last + tail, s + whole);
  }
}

#endif

}  // namespace srformer::kernels
