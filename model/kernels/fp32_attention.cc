#include "model/kernels/fp32_attention.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "model/kernels/attention_groups.h"
#include "model/kernels/avx2.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

#define SRFORMER_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int64_t kColumns = 64;  // output columns per block: 4 vectors of 16
constexpr int kRows = 6;          // output rows per block: 6 x 4 accumulators of 32 registers

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

using Block = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t);
constexpr Block kBlocks[kRows + 1] = {nullptr, block<1>, block<2>, block<3>, block<4>, block<5>, block<6>};

// C [rows, cols] = A [rows, depth] · B [depth, cols] (row strides given), in blocks of 6 x 64.
SRFORMER_AVX512 void product(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t b_stride,
                             int64_t depth, int64_t cols, float* c, int64_t c_stride) {
  for (int64_t i = 0; i < rows; i += kRows) {
    const int64_t r = std::min<int64_t>(kRows, rows - i);
    for (int64_t j = 0; j < cols; j += kColumns) {
      const int64_t n = std::min(kColumns, cols - j);
      const float* ai = a + i * a_stride;
      float* ci = c + i * c_stride + j;
      kBlocks[r](ai, a_stride, b + j, b_stride, depth, n, ci, c_stride);
    }
  }
}

}  // namespace

bool fp32_attention_available() { return use_avx512(); }

void fp32_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads) {
  if (!avx512_available()) throw std::logic_error("fp32_attention needs AVX-512F (fp32_attention_available())");
  const int64_t t = shape.keys, d = shape.head_dim;
  struct Products {
    std::vector<float>* keys_t;  // kᵀ [d, T]: a block reads 64 keys' values of one dimension as vectors
    const float* v;
    int64_t v_stride, t, d;
    void scores(const float* q_rows, int64_t q_stride, int64_t n, float* s) const {
      product(q_rows, q_stride, n, keys_t->data(), t, d, t, s, t);
    }
    void values(const float* p, int64_t n, float* out_rows, int64_t out_stride) const {
      product(p, t, n, v, v_stride, t, d, out_rows, out_stride);
    }
  };
  attention_groups(q, q_layout, bias, out, out_layout, shape, threads, [&](int64_t b, int64_t h) {
    thread_local std::vector<float> keys_t;
    keys_t.resize(static_cast<size_t>(d * t));
    const float* k_g = k + b * k_layout.batch + h * k_layout.head;
    for (int64_t j = 0; j < t; ++j) {
      for (int64_t c = 0; c < d; ++c) keys_t[static_cast<size_t>(c * t + j)] = k_g[j * k_layout.row + c];
    }
    return Products{&keys_t, v + b * v_layout.batch + h * v_layout.head, v_layout.row, t, d};
  });
}

#else

bool fp32_attention_available() { return false; }

void fp32_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                    float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("fp32_attention needs AVX-512F, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
