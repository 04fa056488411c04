// The AVX-512 form of few_rows_linear (model/kernels/few_rows_linear.h): 32 registers of 16 floats
// hold 4 weight rows x 6 input rows of partial sums (24 accumulators), so each loaded vector serves
// more multiply-adds than the AVX2 form's 4 x 3. The same rules hold: one pass over the weights,
// partial sums carried between 512-column passes, and every (row, output) sum computed by the same
// sequence of operations whatever the number of rows.
#include "model/kernels/few_rows_linear_avx512.h"

#include <algorithm>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

#define SRFORMER_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int64_t kChunk = 512;    // columns per pass: 4 weight rows + 6 input rows = 20 KiB in L1
constexpr int64_t kRowGroup = 32;  // input rows per group: 4 x 32 accumulators on the stack (8 KiB)

// Through memory: GCC 12's _mm512_reduce_add_ps trips -Wmaybe-uninitialized inside its own header.
SRFORMER_AVX512 inline float horizontal_sum512(__m512 v) {
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, v);
  return horizontal_sum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

template <int R, int B>
SRFORMER_AVX512 void block(const float* x, int64_t in, const float* w, int64_t i0, int64_t i1, __m512* acc) {
  __m512 a[R][B];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 6
    for (int b = 0; b < B; ++b) a[r][b] = acc[b * R + r];
  }
  for (int64_t i = i0; i < i1; i += 16) {
    __m512 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = _mm512_loadu_ps(w + r * in + i);
#pragma GCC unroll 6
    for (int b = 0; b < B; ++b) {
      const __m512 xv = _mm512_loadu_ps(x + b * in + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r][b] = _mm512_fmadd_ps(wv[r], xv, a[r][b]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 6
    for (int b = 0; b < B; ++b) acc[b * R + r] = a[r][b];
  }
}

template <int R>
SRFORMER_AVX512 void row_group(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias,
                               float* y, int64_t o) {
  __m512 acc[R * kRowGroup];
  for (int64_t j = 0; j < R * rows; ++j) acc[j] = _mm512_setzero_ps();
  const float* wo = w + o * in;
  const int64_t vec_end = in / 16 * 16;
  for (int64_t i0 = 0; i0 < vec_end; i0 += kChunk) {
    const int64_t i1 = std::min(i0 + kChunk, vec_end);
    int64_t b = 0;
    for (; b + 6 <= rows; b += 6) block<R, 6>(x + b * in, in, wo, i0, i1, acc + b * R);
    switch (rows - b) {
      case 5:
        block<R, 5>(x + b * in, in, wo, i0, i1, acc + b * R);
        break;
      case 4:
        block<R, 4>(x + b * in, in, wo, i0, i1, acc + b * R);
        break;
      case 3:
        block<R, 3>(x + b * in, in, wo, i0, i1, acc + b * R);
        break;
      case 2:
        block<R, 2>(x + b * in, in, wo, i0, i1, acc + b * R);
        break;
      case 1:
        block<R, 1>(x + b * in, in, wo, i0, i1, acc + b * R);
        break;
      default:
        break;
    }
  }
  for (int64_t b = 0; b < rows; ++b) {
    for (int r = 0; r < R; ++r) {
      float s = horizontal_sum512(acc[b * R + r]);
      for (int64_t j = vec_end; j < in; ++j) s += wo[r * in + j] * x[b * in + j];
      y[b * out + o + r] = bias != nullptr ? s + bias[o + r] : s;
    }
  }
}

template <int R>
SRFORMER_AVX512 void rows_block(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
                                const float* bias, float* y, int64_t o) {
  for (int64_t g = 0; g < rows; g += kRowGroup) {
    row_group<R>(x + g * in, std::min(kRowGroup, rows - g), in, w, out, bias, y + g * out, o);
  }
}

}  // namespace

void few_rows_linear_avx512(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias,
                            float* y, int threads) {
  const int64_t blocks = out / 4;
  const bool parallel = threads > 1 && out * in >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t blk = 0; blk < blocks; ++blk) rows_block<4>(x, rows, in, w, out, bias, y, blk * 4);
  for (int64_t o = blocks * 4; o < out; ++o) rows_block<1>(x, rows, in, w, out, bias, y, o);
}

#else

void few_rows_linear_avx512(const float*, int64_t, int64_t, const float*, int64_t, const float*, float*, int) {}

#endif

}  // namespace srformer::kernels
