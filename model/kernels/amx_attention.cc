#include "model/kernels/amx_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "model/kernels/amx_linear.h"
#include "model/kernels/avx2.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

// Queries per pass: bounds the per-thread scores buffer (8 MiB at 16k keys) whatever the input length.
constexpr int64_t kQueriesPerPass = 128;

// Row i of the scores: add the bias, then the key mask, then softmax in place (max, Σ exp(s - max),
// scale by 1 / Σ).
SRFORMER_AVX2 void softmax_row(float* s, const float* bias, const float* key_mask, int64_t n) {
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

}  // namespace

void amx_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                   HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                   const AttentionShape& shape, int threads) {
  if (!amx_available()) throw std::logic_error("amx_attention needs AMX (amx_available())");
  const int64_t tq = shape.queries, t = shape.keys, d = shape.head_dim;
  const int64_t groups = shape.batch * shape.heads;
  if (groups <= 0 || tq <= 0 || t <= 0 || d <= 0) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g / shape.heads, h = g % shape.heads;
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(std::min(tq, kQueriesPerPass) * t));
    // q kᵀ takes the keys as the "weight" of a projection with T outputs, p v takes vᵀ ([d, T], read in
    // place with strides) as the weight of a projection with d outputs.
    const Bf16PackedMatrix keys(k + b * k_layout.batch + h * k_layout.head, t, d, nullptr, k_layout.row, 1);
    const Bf16PackedMatrix values_t(v + b * v_layout.batch + h * v_layout.head, d, t, nullptr, 1, v_layout.row);
    const float* q_g = q + b * q_layout.batch + h * q_layout.head;
    float* out_g = out + b * out_layout.batch + h * out_layout.head;
    const float* bias_g = bias.data != nullptr ? bias.data + b * bias.b_stride + h * bias.h_stride : nullptr;
    const float* mask_b = bias.key_mask != nullptr ? bias.key_mask + b * bias.key_mask_b_stride : nullptr;
    for (int64_t i0 = 0; i0 < tq; i0 += kQueriesPerPass) {
      const int64_t n = std::min(kQueriesPerPass, tq - i0);
      keys.multiply(q_g + i0 * q_layout.row, n, scores.data(), 1, q_layout.row, t);
      for (int64_t i = 0; i < n; ++i) {
        softmax_row(scores.data() + i * t, bias_g != nullptr ? bias_g + (i0 + i) * bias.q_stride : nullptr, mask_b, t);
      }
      values_t.multiply(scores.data(), n, out_g + i0 * out_layout.row, 1, t, out_layout.row);
    }
  }
}

#else

void amx_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                   float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("amx_attention needs AMX, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
