// AVX512-BF16 form of the bfloat16 product (model/kernels/bf16_linear.h), for CPUs with `vdpbf16ps`
// but no AMX (AMD Zen 4 and newer, Intel Cooper Lake).
//
// `vdpbf16ps acc, x, w` adds x[2i] w[2i] + x[2i+1] w[2i+1] to fp32 lane i. One packed tile row is 16
// outputs x one input pair, so with x the pair broadcast to every lane, one instruction advances 16
// outputs of one row by two inputs. A register block of kRows rows x kBlocks tiles of 16 outputs
// (24 accumulators) streams its weight panel once per kRows rows: per input pair, 4 weight loads and
// 6 broadcasts feed 24 dot products. Every sum starts from the bias and adds the pairs in input order,
// whatever the blocking, the number of rows or threads.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear_backends.h"
#include "model/kernels/parallel.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

#define SRFORMER_DOT_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

constexpr int kRows = 6;    // rows per register block
constexpr int kBlocks = 4;  // output tiles (16 outputs each) per register block

template <int R, int N>
SRFORMER_DOT_BF16 void block(const Bf16Product& p, int64_t r0, int64_t nb0) {
  const int64_t pairs = p.k_blocks * kBf16InPerTile / 2;
  const int64_t a_stride = pairs * 2;
  const uint16_t* a = p.a + r0 * a_stride;
  // A panel: pair i of tile n at w[n] + 32 i (the 16-pair tiles of one output block are consecutive).
  const uint16_t* w[N];
  __m512 acc[R][N];
#pragma GCC unroll 4
  for (int n = 0; n < N; ++n) {
    w[n] = p.b + (nb0 + n) * p.k_blocks * kBf16TileElems;
    const __m512 bias = _mm512_loadu_ps(p.bias + (nb0 + n) * kBf16OutPerTile);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) acc[r][n] = bias;
  }
  for (int64_t i = 0; i < pairs; ++i) {
    __m512i wv[N];
#pragma GCC unroll 4
    for (int n = 0; n < N; ++n) wv[n] = _mm512_load_si512(w[n] + 32 * i);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      int32_t pair = 0;
      std::memcpy(&pair, a + r * a_stride + 2 * i, sizeof(pair));
      const __m512i xv = _mm512_set1_epi32(pair);
#pragma GCC unroll 4
      for (int n = 0; n < N; ++n) {
        acc[r][n] = _mm512_dpbf16_ps(acc[r][n], reinterpret_cast<const __m512bh&>(xv),
                                     reinterpret_cast<const __m512bh&>(wv[n]));
      }
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    float* y = p.y + (r0 + r) * p.y_stride;
#pragma GCC unroll 4
    for (int n = 0; n < N; ++n) {
      const int64_t o0 = (nb0 + n) * kBf16OutPerTile;
      const int64_t left = p.out - o0;
      if (left >= kBf16OutPerTile) {
        _mm512_storeu_ps(y + o0, acc[r][n]);
      } else {
        _mm512_mask_storeu_ps(y + o0, static_cast<__mmask16>((1U << left) - 1U), acc[r][n]);
      }
    }
  }
}

using BlockFn = void (*)(const Bf16Product&, int64_t, int64_t);

template <int R, int... N>
constexpr std::array<BlockFn, sizeof...(N)> row_of_blocks(std::integer_sequence<int, N...>) {
  return {&block<R, N + 1>...};
}

template <int... R>
constexpr std::array<std::array<BlockFn, kBlocks>, sizeof...(R)> table_of_blocks(std::integer_sequence<int, R...>) {
  return {row_of_blocks<R + 1>(std::make_integer_sequence<int, kBlocks>())...};
}

// kBlocks[r - 1][n - 1]: the block of r rows and n output tiles.
constexpr auto kBlockTable = table_of_blocks(std::make_integer_sequence<int, kRows>());

// Output tiles [nb0, nb1) for every row: each panel of kBlocks tiles stays in L2 while the rows pass.
void run_range(const Bf16Product& p, int64_t nb0, int64_t nb1) {
  for (int64_t nb = nb0; nb < nb1; nb += kBlocks) {
    const int64_t n = std::min<int64_t>(kBlocks, nb1 - nb);
    for (int64_t r = 0; r < p.rows; r += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, p.rows - r);
      kBlockTable[rows - 1][n - 1](p, r, nb);
    }
  }
}

}  // namespace

void dot_bf16_product(const Bf16Product& p, int threads) {
  if (!dot_bf16_supported()) throw std::logic_error("dot_bf16_product needs AVX512-BF16 (dot_bf16_available())");
  const int64_t panels = (p.n_blocks + kBlocks - 1) / kBlocks;
  // Whole panels per thread; every output's sum is the same whichever thread computes it.
  parallel_chunks(panels, p.parallel ? threads : 1, [&](int64_t begin, int64_t end) {
    run_range(p, begin * kBlocks, std::min(p.n_blocks, end * kBlocks));
  });
}

#else  // not x86-64: dot_bf16_supported() is false and nobody calls dot_bf16_product

void dot_bf16_product(const Bf16Product&, int) {
  throw std::logic_error("dot_bf16_product needs AVX512-BF16, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
