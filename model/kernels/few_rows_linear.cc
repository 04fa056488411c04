#include "model/kernels/few_rows_linear.h"

#include <algorithm>

#include "model/kernels/avx2.h"
#include "model/kernels/few_rows_linear_avx512.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

// Columns of the inner dimension per pass: 4 weight rows and 3 input rows of this many floats (14 KiB)
// stay in L1 while one pass goes over all input rows.
constexpr int64_t kChunk = 512;
// Input rows per group: their accumulators (4 x 32 vectors, 4 KiB) live on the stack.
constexpr int64_t kRowGroup = 32;

// R weight rows against B input rows over columns [i0, i1) (multiples of 8): R*B accumulators in
// registers (R=4, B=3 uses 12 of 16), each weight vector loaded once serves B rows. acc[b * R + r]
// carries the sums between passes. Every (r, b) sum runs the same sequence of operations for any R
// and B, which keeps results independent of the batch.
template <int R, int B>
SRFORMER_AVX2 void block(const float* x, int64_t in, const float* w, int64_t i0, int64_t i1, __m256* acc) {
  __m256 a[R][B];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int b = 0; b < B; ++b) a[r][b] = acc[b * R + r];
  }
  for (int64_t i = i0; i < i1; i += 8) {
    __m256 wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * in + i);
#pragma GCC unroll 4
    for (int b = 0; b < B; ++b) {
      const __m256 xv = _mm256_loadu_ps(x + b * in + i);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) a[r][b] = _mm256_fmadd_ps(wv[r], xv, a[r][b]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int b = 0; b < B; ++b) acc[b * R + r] = a[r][b];
  }
}

// Up to kRowGroup input rows against R weight rows starting at output o.
template <int R>
SRFORMER_AVX2 void row_group(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias,
                             float* y, int64_t o) {
  __m256 acc[R * kRowGroup];
  for (int64_t j = 0; j < R * rows; ++j) acc[j] = _mm256_setzero_ps();
  const float* wo = w + o * in;
  const int64_t vec_end = in / 8 * 8;
  for (int64_t i0 = 0; i0 < vec_end; i0 += kChunk) {
    const int64_t i1 = std::min(i0 + kChunk, vec_end);
    int64_t b = 0;
    for (; b + 3 <= rows; b += 3) block<R, 3>(x + b * in, in, wo, i0, i1, acc + b * R);
    if (rows - b == 2) block<R, 2>(x + b * in, in, wo, i0, i1, acc + b * R);
    if (rows - b == 1) block<R, 1>(x + b * in, in, wo, i0, i1, acc + b * R);
  }
  for (int64_t b = 0; b < rows; ++b) {
    for (int r = 0; r < R; ++r) {
      float s = horizontal_sum(acc[b * R + r]);
      for (int64_t j = vec_end; j < in; ++j) s += wo[r * in + j] * x[b * in + j];
      y[b * out + o + r] = bias != nullptr ? s + bias[o + r] : s;
    }
  }
}

template <int R>
SRFORMER_AVX2 void rows_block(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias,
                              float* y, int64_t o) {
  for (int64_t g = 0; g < rows; g += kRowGroup) {
    row_group<R>(x + g * in, std::min(kRowGroup, rows - g), in, w, out, bias, y + g * out, o);
  }
}

}  // namespace

void few_rows_linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias, float* y,
                     int threads) {
  if (use_avx512()) {
    few_rows_linear_avx512(x, rows, in, w, out, bias, y, threads);
    return;
  }
  const int64_t blocks = out / 4;
  const bool parallel = threads > 1 && out * in >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t blk = 0; blk < blocks; ++blk) rows_block<4>(x, rows, in, w, out, bias, y, blk * 4);
  for (int64_t o = blocks * 4; o < out; ++o) rows_block<1>(x, rows, in, w, out, bias, y, o);
}

#else  // not x86-64: callers use BLAS; this plain loop only keeps the function correct

void few_rows_linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, const float* bias, float* y,
                     int /*threads*/) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      float s = 0.0F;
      for (int64_t j = 0; j < in; ++j) s += w[o * in + j] * x[r * in + j];
      y[r * out + o] = bias != nullptr ? s + bias[o] : s;
    }
  }
}

#endif

}  // namespace srformer::kernels
