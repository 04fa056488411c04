#pragma once
// The AVX-512 outer-product block that the fp32 products share (kernels/fp32_attention.cc,
// kernels/fp32_packed_linear.cc), and an AVX2 form of its product: 6 rows x 64 columns of sums in 24 registers, each
// loaded vector of b serving 6 rows, each sum one fused multiply-add chain in the order of the inner dimension (so a
// row's result does not depend on the rows around it). Internal to model/kernels/.
#include <algorithm>
#include <cstdint>

#include "model/kernels/avx2.h"

#ifdef SRFORMER_HAVE_AVX2_KERNELS

#ifndef SRFORMER_AVX512
#define SRFORMER_AVX512 __attribute__((target("avx512f,avx2,fma")))
#endif

namespace srformer::kernels::outer {

constexpr int64_t kColumns = 64;  // output columns per block: 4 vectors of 16
constexpr int kRows = 6;          // output rows per block: 6 x 4 accumulators of 32 registers

// acc[r][x] += Σ_kk a[r * a_stride + kk] · b[kk * b_stride + x * x_stride ..], kk = 0, 1, ... in order: b's
// four vectors of 16 columns lie x_stride floats apart (16 for a row-major b; a packed matrix's panels,
// kernels/fp32_packed_linear.h, are further apart). Full: all 64 columns, unmasked loads (5–10% faster
// on Zen 4 than the masked ones, which the last block needs).
template <int R, bool Full>
SRFORMER_AVX512 inline void accumulate(const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                                       int64_t x_stride, int64_t depth, const __mmask16* mask, __m512 (&acc)[R][4]) {
  for (int64_t kk = 0; kk < depth; ++kk) {
    const float* row = b + kk * b_stride;
    __m512 bv[4];
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x)
      bv[x] = Full ? _mm512_loadu_ps(row + x_stride * x) : _mm512_maskz_loadu_ps(mask[x], row + x_stride * x);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * a_stride + kk]);
#pragma GCC unroll 4
      for (int x = 0; x < 4; ++x) acc[r][x] = _mm512_fmadd_ps(av, bv[x], acc[r][x]);
    }
  }
}

// c[r * c_stride + j] = Σ_kk a[r * a_stride + kk] · b[kk * b_stride + (j / 16) * x_stride + j % 16] for
// r < R, j < n ≤ 64, the terms added in order kk = 0, 1, ... (one fused multiply-add each). Columns past
// n are neither read nor written (masked).
template <int R>
SRFORMER_AVX512 inline void block(const float* a, int64_t a_stride, const float* b, int64_t b_stride, int64_t x_stride,
                                  int64_t depth, int64_t n, float* c, int64_t c_stride) {
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
  if (n == kColumns) {
    accumulate<R, true>(a, a_stride, b, b_stride, x_stride, depth, mask, acc);
  } else {
    accumulate<R, false>(a, a_stride, b, b_stride, x_stride, depth, mask, acc);
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int x = 0; x < 4; ++x) _mm512_mask_storeu_ps(c + r * c_stride + 16 * x, mask[x], acc[r][x]);
  }
}

using Block = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
inline constexpr Block kBlocks[kRows + 1] = {nullptr, block<1>, block<2>, block<3>, block<4>, block<5>, block<6>};

// C [rows, cols] = A [rows, depth] · B [depth, cols] (row strides given), in blocks of 6 x 64.
SRFORMER_AVX512 inline void product(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t b_stride,
                                    int64_t depth, int64_t cols, float* c, int64_t c_stride) {
  for (int64_t i = 0; i < rows; i += kRows) {
    const int64_t r = std::min<int64_t>(kRows, rows - i);
    for (int64_t j = 0; j < cols; j += kColumns) {
      const int64_t n = std::min(kColumns, cols - j);
      const float* ai = a + i * a_stride;
      float* ci = c + i * c_stride + j;
      kBlocks[r](ai, a_stride, b + j, b_stride, 16, depth, n, ci, c_stride);
    }
  }
}

// The AVX2 form of product() for CPUs without AVX-512 (and SRFORMER_CPU_AVX512=0): blocks of 6 rows x 16
// columns, 12 sums in 16 registers. Each sum is the same fused multiply-add chain in the order of the
// inner dimension as above, so both forms give the same bits.
constexpr int64_t kAvx2Columns = 16;

template <int R, bool Full>
SRFORMER_AVX2 inline void avx2_accumulate(const float* a, int64_t a_stride, const float* b, int64_t b_stride,
                                          int64_t depth, const __m256i* mask, __m256 (&acc)[R][2]) {
  for (int64_t kk = 0; kk < depth; ++kk) {
    const float* row = b + kk * b_stride;
    __m256 bv[2];
    for (int x = 0; x < 2; ++x) bv[x] = Full ? _mm256_loadu_ps(row + 8 * x) : _mm256_maskload_ps(row + 8 * x, mask[x]);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + r * a_stride + kk);
      for (int x = 0; x < 2; ++x) acc[r][x] = _mm256_fmadd_ps(av, bv[x], acc[r][x]);
    }
  }
}

// block() with AVX2: r < R rows, j < n <= 16 columns (masked loads and stores past n).
template <int R>
SRFORMER_AVX2 inline void avx2_block(const float* a, int64_t a_stride, const float* b, int64_t b_stride, int64_t depth,
                                     int64_t n, float* c, int64_t c_stride) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  __m256i mask[2];
  for (int x = 0; x < 2; ++x) {
    const auto left = static_cast<int>(std::clamp<int64_t>(n - 8 * x, 0, 8));
    mask[x] = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lanes);
  }
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    for (int x = 0; x < 2; ++x) acc[r][x] = _mm256_setzero_ps();
  }
  if (n == kAvx2Columns) {
    avx2_accumulate<R, true>(a, a_stride, b, b_stride, depth, mask, acc);
  } else {
    avx2_accumulate<R, false>(a, a_stride, b, b_stride, depth, mask, acc);
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    for (int x = 0; x < 2; ++x) _mm256_maskstore_ps(c + r * c_stride + 8 * x, mask[x], acc[r][x]);
  }
}

using Avx2Block = void (*)(const float*, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t);
inline constexpr Avx2Block kAvx2Blocks[kRows + 1] = {nullptr,       avx2_block<1>, avx2_block<2>, avx2_block<3>,
                                                     avx2_block<4>, avx2_block<5>, avx2_block<6>};

// product() by the AVX2 blocks.
SRFORMER_AVX2 inline void avx2_product(const float* a, int64_t a_stride, int64_t rows, const float* b, int64_t b_stride,
                                       int64_t depth, int64_t cols, float* c, int64_t c_stride) {
  for (int64_t i = 0; i < rows; i += kRows) {
    const int64_t r = std::min<int64_t>(kRows, rows - i);
    for (int64_t j = 0; j < cols; j += kAvx2Columns) {
      kAvx2Blocks[r](a + i * a_stride, a_stride, b + j, b_stride, depth, std::min(kAvx2Columns, cols - j),
                     c + i * c_stride + j, c_stride);
    }
  }
}

}  // namespace srformer::kernels::outer

#endif
