#include "model/kernels/attention_products.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "model/kernels/attention_groups.h"  // attention_softmax_row
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

// out[0, 8N) = Σ_t p[t * p_stride] row(t)[0, 8N): N vectors of the output stay in registers while
// the T rows stream past once. Each element is one chain of fused multiply-adds in t order, however
// many vectors go together (the same bits).
template <int N, typename Rows>
SRFORMER_AVX2 void sum_vectors(const float* p, int64_t p_stride, const Rows& row, int64_t T, int64_t j0, float* out) {
  __m256 acc[N];
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t t = 0; t < T; ++t) {
    const __m256 pt = _mm256_set1_ps(p[t * p_stride]);
    const float* r = row(t) + j0;
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) acc[c] = _mm256_fmadd_ps(pt, _mm256_loadu_ps(r + 8 * c), acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) _mm256_storeu_ps(out + j0 + 8 * c, acc[c]);
}

// out = Σ_t p[t * p_stride] row(t)[:], row(t) the t-th row of v: 64 floats per pass over the rows, then
// the rest of the multiples of 8 in one more pass (a head size of 32 in one pass, not four: each pass
// is a chain of T dependent multiply-adds per vector).
template <typename Rows>
SRFORMER_AVX2 void sum_rows(const float* p, int64_t p_stride, const Rows& row, int64_t T, int64_t d, float* out) {
  constexpr int64_t kWidth = 64;
  int64_t j0 = 0;
  for (; j0 + kWidth <= d; j0 += kWidth) sum_vectors<8>(p, p_stride, row, T, j0, out);
  switch ((d - j0) / 8) {
    case 7:
      sum_vectors<7>(p, p_stride, row, T, j0, out);
      break;
    case 6:
      sum_vectors<6>(p, p_stride, row, T, j0, out);
      break;
    case 5:
      sum_vectors<5>(p, p_stride, row, T, j0, out);
      break;
    case 4:
      sum_vectors<4>(p, p_stride, row, T, j0, out);
      break;
    case 3:
      sum_vectors<3>(p, p_stride, row, T, j0, out);
      break;
    case 2:
      sum_vectors<2>(p, p_stride, row, T, j0, out);
      break;
    case 1:
      sum_vectors<1>(p, p_stride, row, T, j0, out);
      break;
    default:
      break;
  }
  j0 += (d - j0) / 8 * 8;
  for (; j0 < d; ++j0) {
    // One fused multiply-add per term, as the vectors above. Written `s += p * r`, GCC multiplied the
    // first terms four at a time and added each product rounded, fusing only the last T % 4: a column
    // past the last 8 (a head size no multiple of 8) got other bits when masked keys followed a row's own.
    float s = 0.0F;
    for (int64_t t = 0; t < T; ++t) s = std::fma(p[t * p_stride], row(t)[j0], s);
    out[j0] = s;
  }
}

SRFORMER_AVX2 void sum_group(const float* p, int64_t p_stride, const float* v, int64_t T, int64_t d, float* out) {
  sum_rows(
      p, p_stride, [v, d](int64_t t) { return v + t * d; }, T, d, out);
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

void softmax_rows(float* scores, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) attention_softmax_row(scores + r * n, nullptr, nullptr, n);
}

void slot_attention(const float* q, HeadLayout q_layout, const float* k, const float* v, HeadLayout cache,
                    const int32_t* slot_rows, int64_t slot_rows_stride, const AttentionBias& bias, float* out,
                    HeadLayout out_layout, const SlotAttentionShape& shape, int threads) {
  const int64_t groups = shape.batch * shape.heads, T = shape.slots, d = shape.head_dim;
  const bool parallel = threads > 1 && groups * T * d * 2 >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g / shape.heads, h = g % shape.heads;
    const int32_t* rows = slot_rows != nullptr ? slot_rows + b * slot_rows_stride : nullptr;
    const auto slot = [&](const float* base, int64_t t) {
      return base + (rows != nullptr ? rows[t] : b) * cache.batch + h * cache.head + t * cache.row;
    };
    thread_local std::vector<float> p;
    p.resize(static_cast<size_t>(T));
    const float* q_g = q + b * q_layout.batch + h * q_layout.head;
    for (int64_t t = 0; t < T; ++t) p[static_cast<size_t>(t)] = dot(q_g, slot(k, t), d);
    attention_softmax_row(p.data(), bias.data != nullptr ? bias.data + b * bias.b_stride + h * bias.h_stride : nullptr,
                          bias.key_mask != nullptr ? bias.key_mask + b * bias.key_mask_b_stride : nullptr, T);
    sum_rows(
        p.data(), 1, [&](int64_t t) { return slot(v, t); }, T, d, out + b * out_layout.batch + h * out_layout.head);
  }
}

void window_attention(const float* q, HeadLayout q_layout, const float* k, const float* v, HeadLayout kv,
                      const int64_t* rows, const int64_t* first, const int64_t* count, float* out,
                      HeadLayout out_layout, const WindowAttentionShape& shape, int threads) {
  const int64_t groups = shape.batch * shape.heads, d = shape.head_dim;
  int64_t keys = 0;
  for (int64_t b = 0; b < shape.batch; ++b) keys += count[b];
  const bool parallel = threads > 1 && keys * shape.heads * d * 2 >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g / shape.heads, h = g % shape.heads, n = count[b];
    float* out_g = out + b * out_layout.batch + h * out_layout.head;
    if (n <= 0) {
      std::fill(out_g, out_g + d, 0.0F);
      continue;
    }
    const int64_t at = rows[b] * kv.batch + h * kv.head + first[b] * kv.row;
    thread_local std::vector<float> p;
    p.resize(static_cast<size_t>(n));
    const float* q_g = q + b * q_layout.batch + h * q_layout.head;
    for (int64_t t = 0; t < n; ++t) p[static_cast<size_t>(t)] = dot(q_g, k + at + t * kv.row, d);
    attention_softmax_row(p.data(), nullptr, nullptr, n);
    sum_rows(
        p.data(), 1, [&](int64_t t) { return v + at + t * kv.row; }, n, d, out_g);
  }
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

void softmax_rows(float*, int64_t, int64_t) {
  throw std::logic_error("softmax_rows needs AVX2 + FMA, which this build or platform lacks");
}

void slot_attention(const float*, HeadLayout, const float*, const float*, HeadLayout, const int32_t*, int64_t,
                    const AttentionBias&, float*, HeadLayout, const SlotAttentionShape&, int) {
  throw std::logic_error("slot_attention needs AVX2 + FMA, which this build or platform lacks");
}

void window_attention(const float*, HeadLayout, const float*, const float*, HeadLayout, const int64_t*, const int64_t*,
                      const int64_t*, float*, HeadLayout, const WindowAttentionShape&, int) {
  throw std::logic_error("window_attention needs AVX2 + FMA, which this build or platform lacks");
}

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
