#include "model/kernels/fp32_packed_linear.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "model/kernels/avx2.h"
#include "model/kernels/outer_product.h"

namespace srformer::kernels {

namespace {
std::atomic<bool>& packed_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_PACKED")};
  return on;
}
}  // namespace

bool fp32_packed_available() { return avx2_fma_available() && packed_switch().load(std::memory_order_relaxed); }
void set_fp32_packed(bool on) { packed_switch().store(on); }

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

constexpr int64_t kPanel = Fp32PackedMatrix::kPanel;
constexpr int64_t kBlockColumns = Fp32PackedMatrix::kBlockColumns;
static_assert(kBlockColumns == outer::kColumns, "a column block is one AVX-512 outer-product block wide");
static_assert(kBlockColumns % kPanel == 0, "a column block is whole panels");

// Rows [0, rows) of x against one column block (four panels, `panel_stride` floats apart) by the AVX-512
// outer-product block, 6 rows at a time; y points at the block's first output of row 0. `width` (<= 64)
// outputs are written (the padding's columns are neither read nor written), then the bias added.
SRFORMER_AVX512 void avx512_block_product(const float* x, int64_t rows, int64_t in, const float* block,
                                          int64_t panel_stride, const float* bias, int64_t width, float* y,
                                          int64_t y_stride) {
  for (int64_t r = 0; r < rows; r += outer::kRows) {
    const int64_t n = std::min<int64_t>(outer::kRows, rows - r);
    outer::kBlocks[n](x + r * in, in, block, kPanel, panel_stride, in, width, y + r * y_stride, y_stride);
  }
  if (bias == nullptr) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * y_stride;
    for (int64_t j = 0; j < width; j += 16) {
      const int64_t n = std::min<int64_t>(16, width - j);
      const auto m = static_cast<__mmask16>(n == 16 ? 0xFFFFU : (1U << n) - 1U);
      _mm512_mask_storeu_ps(yr + j, m,
                            _mm512_add_ps(_mm512_maskz_loadu_ps(m, yr + j), _mm512_maskz_loadu_ps(m, bias + j)));
    }
  }
}

// The AVX2 block: R (<= 3) rows x C (<= 4) panels, 2RC sums in registers, each weight vector loaded
// serving R rows. Few rows take several panels at once so that enough independent chains hide the
// fused multiply-add's latency; 3 rows x 2 panels (12 sums, 4 weight loads and 3 broadcasts per 12
// multiply-adds) measured 10–40% faster than 6 rows x 1 panel on Zen 4 (AVX-512 off).
// The same chain per output as the AVX-512 block (zero, then one fused multiply-add per i in order,
// then + bias), so both instruction sets give the same bits. A panel's 16 columns are always readable
// (padded with zeros); `width` of them are written.
template <int R, int C>
SRFORMER_AVX2 void avx2_block(const float* x, int64_t in, const float* panel, int64_t panel_stride, const float* bias,
                              int64_t width, float* y, int64_t y_stride) {
  __m256 acc[R][2 * C];
#pragma GCC unroll 3
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < 2 * C; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < in; ++i) {
    __m256 b[2 * C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      b[2 * c] = _mm256_loadu_ps(panel + c * panel_stride + i * kPanel);
      b[2 * c + 1] = _mm256_loadu_ps(panel + c * panel_stride + i * kPanel + 8);
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(x + r * in + i);
#pragma GCC unroll 8
      for (int v = 0; v < 2 * C; ++v) acc[r][v] = _mm256_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  // Spilled once, after the loop (constant indices keep acc in registers inside it).
  alignas(32) float sums[R][kPanel * C];
#pragma GCC unroll 3
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < 2 * C; ++v) _mm256_store_ps(sums[r] + 8 * v, acc[r][v]);
  }
  for (int r = 0; r < R; ++r) {
    float* yr = y + r * y_stride;
    for (int64_t j = 0; j < width; ++j) yr[j] = bias != nullptr ? sums[r][j] + bias[j] : sums[r][j];
  }
}

using Avx2Block = void (*)(const float*, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t);
template <int R>
constexpr Avx2Block kAvx2Row[5] = {nullptr, avx2_block<R, 1>, avx2_block<R, 2>, avx2_block<R, 3>, avx2_block<R, 4>};
constexpr int64_t kAvx2Rows = 3;
constexpr const Avx2Block* kAvx2Blocks[kAvx2Rows + 1] = {nullptr, kAvx2Row<1>, kAvx2Row<2>, kAvx2Row<3>};
// Panels per block for R rows: at least 8 chains in flight, at most 12 sums in the 16 registers.
constexpr int64_t kPanelsFor[kAvx2Rows + 1] = {0, 4, 2, 2};

// Rows [0, rows) of x against one column block (up to four panels, `panel_stride` floats apart) by the
// AVX2 blocks.
void avx2_block_product(const float* x, int64_t rows, int64_t in, const float* block, int64_t panel_stride,
                        const float* bias, int64_t width, float* y, int64_t y_stride) {
  const int64_t panels = (width + kPanel - 1) / kPanel;
  for (int64_t r = 0; r < rows; r += kAvx2Rows) {
    const int64_t block_rows = std::min(kAvx2Rows, rows - r);
    for (int64_t p = 0; p < panels; p += kPanelsFor[block_rows]) {
      const int64_t c = std::min(kPanelsFor[block_rows], panels - p);
      const int64_t j = p * kPanel;
      kAvx2Blocks[block_rows][c](x + r * in, in, block + p * panel_stride, panel_stride,
                                 bias == nullptr ? nullptr : bias + j, std::min(c * kPanel, width - j),
                                 y + r * y_stride + j, y_stride);
    }
  }
}

}  // namespace

Fp32PackedMatrix::Fp32PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias) : out_(out), in_(in) {
  if (!avx2_fma_available())
    throw std::logic_error("Fp32PackedMatrix needs AVX2 and FMA (kernels::avx2_fma_available())");
  if (out < 0 || in < 0) throw std::invalid_argument("Fp32PackedMatrix: negative shape");
  // Whole column blocks, so that the AVX-512 block's four panel addresses are always inside the buffer.
  const int64_t padded = (out + kBlockColumns - 1) / kBlockColumns * kBlockColumns;
  panels_.assign(static_cast<size_t>(padded * in), 0.0F);
  for (int64_t o = 0; o < out; ++o) {
    float* dst = panels_.data() + (o / kPanel) * in * kPanel + o % kPanel;
    const float* src = w + o * in;
    for (int64_t i = 0; i < in; ++i) dst[i * kPanel] = src[i];
  }
  if (bias != nullptr) bias_.assign(bias, bias + out);
}

void Fp32PackedMatrix::multiply(const float* x, int64_t rows, float* y, int threads) const {
  // Work items: (column block, block of up to kRowBlock rows), column-major, so that a thread's items
  // share a block of weights (it stays in cache while its row blocks pass) and many rows (an encoder's)
  // spread over more threads than there are column blocks. Which block a row falls in changes nothing
  // in its arithmetic.
  constexpr int64_t kRowBlock = 8 * outer::kRows;
  const int64_t column_blocks = (out_ + kBlockColumns - 1) / kBlockColumns;
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t items = column_blocks * row_blocks;
  const int64_t panel_stride = in_ * kPanel;
  const bool avx512 = use_avx512();
  const bool parallel = threads > 1 && items > 1 && rows * out_ * in_ >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t o = (item / row_blocks) * kBlockColumns;
    const int64_t r = (item % row_blocks) * kRowBlock;
    const int64_t n = std::min(kRowBlock, rows - r);
    const float* bias = bias_.empty() ? nullptr : bias_.data() + o;
    const int64_t width = std::min(kBlockColumns, out_ - o);
    const float* block = panels_.data() + o * in_;
    // A decode step's 1–3 rows stream the weights from memory once: the AVX2 blocks keep 8 chains in
    // flight where the AVX-512 block has 4 at one row, which made batch-1 steps 9–20% faster on Zen 4
    // (T5-small, BART-base; docs/BENCHMARKS.md).
    if (avx512 && n > kAvx2Rows) {
      avx512_block_product(x + r * in_, n, in_, block, panel_stride, bias, width, y + r * out_ + o, out_);
    } else {
      avx2_block_product(x + r * in_, n, in_, block, panel_stride, bias, width, y + r * out_ + o, out_);
    }
  }
}

#else  // not x86-64: fp32_packed_available() is false there

Fp32PackedMatrix::Fp32PackedMatrix(const float*, int64_t, int64_t, const float*) : out_(0), in_(0) {
  throw std::logic_error("Fp32PackedMatrix needs AVX2 and FMA, which this build or platform lacks");
}

void Fp32PackedMatrix::multiply(const float*, int64_t, float*, int) const {}

#endif

}  // namespace srformer::kernels
