#include "model/kernels/fp32_attention.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "model/kernels/avx2.h"
#include "model/kernels/softmax_row.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

#define SRFORMER_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int64_t kQueriesPerPass = 128;  // bounds the per-thread scores buffer whatever the length
constexpr int64_t kColumns = 64;          // output columns per block: 4 vectors of 16
constexpr int kRows = 6;                  // output rows per block: 6 x 4 accumulators of 32 registers

// c[r * c_stride + j] = Σ_kk a[r * a_stride + kk] · b[kk * b_stride + j] for r < R, j < n ≤ 64, the
// terms added in order kk = 0, 1, ... (one fused multiply-add each). Columns past n are neither read
// nor written (masked).
template <int R>
SRFORMER_AVX512 void block(const float* a, int64_t a_stride, const float* b, int64_t b_stride, int64_t depth, int64_t n,
                           float* c, int64_t c_stride) {
  __mmask16 mask[4];
  for (int x = 0; x < 4; ++x) {
    const int64_t left = std::clamp<int64_t>(n - 16 * x, 0, 16);
    mask[x] = static_cast<__mmask16>(left == 16 ? 0xFFFF : (1U << left) - 1U);
  }
  __m512 acc[R][4];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) acc[r][x] = _mm512_setzero_ps();
  }
  for (int64_t kk = 0; kk < depth; ++kk) {
    const float* row = b + kk * b_stride;
    __m512 bv[4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) bv[x] = _mm512_maskz_loadu_ps(mask[x], row + 16 * x);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * a_stride + kk]);
#pragma GCC unroll 4
      for (int x = 0; x < 4; ++x) acc[r][x] = _mm512_fmadd_ps(av, bv[x], acc[r][x]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) _mm512_mask_storeu_ps(c + r * c_stride + 16 * x, mask[x], acc[r][x]);
  }
}

// C [rows, cols] = A [rows, depth] · B [depth, cols] (row strides given), in blocks of 6 x 64.
SRFORMER_AVX512 void product(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t b_stride,
                             int64_t depth, int64_t cols, float* c, int64_t c_stride) {
  for (int64_t i = 0; i < rows; i += kRows) {
    const int64_t r = std::min<int64_t>(kRows, rows - i);
    for (int64_t j = 0; j < cols; j += kColumns) {
      const int64_t n = std::min(kColumns, cols - j);
      const float* ai = a + i * a_stride;
      float* ci = c + i * c_stride + j;
      switch (r) {
        case 6:
          block<6>(ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
          break;
        case 5:
          block<5>(ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
          break;
        case 4:
          block<4>(ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
          break;
        case 3:
          block<3>(ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
          break;
        case 2:
          block<2>(ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
          break;
        default:
          block<1>(ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
          break;
      }
    }
  }
}

}  // namespace

bool fp32_attention_available() { return use_avx512(); }

void fp32_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads) {
  if (!avx512_available()) throw std::logic_error("fp32_attention needs AVX-512F (fp32_attention_available())");
  const int64_t tq = shape.queries, t = shape.keys, d = shape.head_dim;
  const int64_t groups = shape.batch * shape.heads;
  if (groups <= 0 || tq <= 0 || t <= 0 || d <= 0) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g / shape.heads, h = g % shape.heads;
    thread_local std::vector<float> scores, keys_t;
    scores.resize(static_cast<size_t>(std::min(tq, kQueriesPerPass) * t));
    keys_t.resize(static_cast<size_t>(d * t));
    // kᵀ [d, T], so that a block reads 64 keys' values of one dimension as vectors.
    const float* k_g = k + b * k_layout.batch + h * k_layout.head;
    for (int64_t j = 0; j < t; ++j) {
      for (int64_t c = 0; c < d; ++c) keys_t[static_cast<size_t>(c * t + j)] = k_g[j * k_layout.row + c];
    }
    const float* q_g = q + b * q_layout.batch + h * q_layout.head;
    const float* v_g = v + b * v_layout.batch + h * v_layout.head;
    float* out_g = out + b * out_layout.batch + h * out_layout.head;
    const float* bias_g = bias.data != nullptr ? bias.data + b * bias.b_stride + h * bias.h_stride : nullptr;
    const float* mask_b = bias.key_mask != nullptr ? bias.key_mask + b * bias.key_mask_b_stride : nullptr;
    for (int64_t i0 = 0; i0 < tq; i0 += kQueriesPerPass) {
      const int64_t n = std::min(kQueriesPerPass, tq - i0);
      product(q_g + i0 * q_layout.row, q_layout.row, n, keys_t.data(), t, d, t, scores.data(), t);
      for (int64_t i = 0; i < n; ++i) {
        attention_softmax_row(scores.data() + i * t, bias_g != nullptr ? bias_g + (i0 + i) * bias.q_stride : nullptr,
                              mask_b, t);
      }
      product(scores.data(), t, n, v_g, v_layout.row, t, d, out_g + i0 * out_layout.row, out_layout.row);
    }
  }
}

#else

bool fp32_attention_available() { return false; }

void fp32_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                    float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("fp32_attention needs AVX-512F, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
