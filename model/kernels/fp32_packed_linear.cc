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

constexpr int64_t kWide = Fp32PackedMatrix::kWidePanel;
constexpr int64_t kNarrow = Fp32PackedMatrix::kNarrowPanel;
static_assert(kWide == outer::kColumns, "a wide panel is one AVX-512 outer-product block wide");

// Rows [0, rows) of x against one wide panel; y points at the panel's first output of row 0. `width`
// (<= 64) outputs are written (the padding's columns are neither read nor written), then the bias added.
SRFORMER_AVX512 void wide_panel_product(const float* x, int64_t rows, int64_t in, const float* panel, const float* bias,
                                        int64_t width, float* y, int64_t y_stride) {
  outer::product(x, in, rows, panel, kWide, in, width, y, y_stride);
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

// The AVX2 block: R (<= 3) rows x C (<= 4) slices of 16 columns, 2RC sums in registers, each weight
// vector loaded serving R rows. Few rows take several slices at once so that enough independent
// chains hide the fused multiply-add's latency; 3 rows x 2 slices (12 sums, 4 weight loads and 3
// broadcasts per 12 multiply-adds) measured 10–40% faster than 6 rows x 1 slice on Zen 4 (AVX-512 off).
// The same chain per output as the AVX-512 block (zero, then one fused multiply-add per i in order,
// then + bias), so both instruction sets give the same bits. A slice's 16 columns are always readable
// (panels are padded with zeros); `width` of them are written.
template <int R, int C>
SRFORMER_AVX2 void narrow_block(const float* x, int64_t in, const float* const* slices, int64_t stride,
                                const float* bias, int64_t width, float* y, int64_t y_stride) {
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
      b[2 * c] = _mm256_loadu_ps(slices[c] + i * stride);
      b[2 * c + 1] = _mm256_loadu_ps(slices[c] + i * stride + 8);
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(x + r * in + i);
#pragma GCC unroll 8
      for (int v = 0; v < 2 * C; ++v) acc[r][v] = _mm256_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  // Spilled once, after the loop (constant indices keep acc in registers inside it).
  alignas(32) float sums[R][kNarrow * C];
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

using NarrowBlock = void (*)(const float*, int64_t, const float* const*, int64_t, const float*, int64_t, float*,
                             int64_t);
template <int R>
constexpr NarrowBlock kNarrowRow[5] = {nullptr, narrow_block<R, 1>, narrow_block<R, 2>, narrow_block<R, 3>,
                                       narrow_block<R, 4>};
constexpr int64_t kNarrowRows = 3;
constexpr const NarrowBlock* kNarrowBlocks[kNarrowRows + 1] = {nullptr, kNarrowRow<1>, kNarrowRow<2>, kNarrowRow<3>};
// Slices per block for R rows: at least 8 chains in flight, at most 12 sums in the 16 registers.
constexpr int64_t kSlicesFor[kNarrowRows + 1] = {0, 4, 2, 2};

// Rows [0, rows) of x against up to 64 columns starting at `slice[0]`: `slices` (<= 4) 16-column
// slices, each at its own address (separate narrow panels, or one wide panel's quarters), their rows
// `stride` floats apart.
void narrow_columns_product(const float* x, int64_t rows, int64_t in, const float* const* slice, int64_t slices,
                            int64_t stride, const float* bias, int64_t width, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < rows; r += kNarrowRows) {
    const int64_t block_rows = std::min(kNarrowRows, rows - r);
    for (int64_t s = 0; s < slices; s += kSlicesFor[block_rows]) {
      const int64_t c = std::min(kSlicesFor[block_rows], slices - s);
      const int64_t j = s * kNarrow;
      kNarrowBlocks[block_rows][c](x + r * in, in, slice + s, stride, bias == nullptr ? nullptr : bias + j,
                                   std::min(c * kNarrow, width - j), y + r * y_stride + j, y_stride);
    }
  }
}

}  // namespace

Fp32PackedMatrix::Fp32PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias)
    : out_(out), in_(in), panel_(use_avx512() ? kWidePanel : kNarrowPanel) {
  if (!avx2_fma_available())
    throw std::logic_error("Fp32PackedMatrix needs AVX2 and FMA (kernels::avx2_fma_available())");
  if (out < 0 || in < 0) throw std::invalid_argument("Fp32PackedMatrix: negative shape");
  const int64_t panels = (out + panel_ - 1) / panel_;
  panels_.assign(static_cast<size_t>(panels * in * panel_), 0.0F);
  for (int64_t o = 0; o < out; ++o) {
    float* dst = panels_.data() + (o / panel_) * in * panel_ + o % panel_;
    const float* src = w + o * in;
    for (int64_t i = 0; i < in; ++i) dst[i * panel_] = src[i];
  }
  if (bias != nullptr) bias_.assign(bias, bias + out);
}

void Fp32PackedMatrix::multiply(const float* x, int64_t rows, float* y, int threads) const {
  // Work items: (column block, block of up to kRowBlock rows), column-major, so that a thread's items
  // share a block of weights (it stays in cache while its row blocks pass) and many rows (an encoder's)
  // spread over more threads than there are column blocks. Which block a row falls in changes nothing
  // in its arithmetic. A column block is 64 outputs: a wide panel under AVX-512, else four 16-column
  // slices (four narrow panels, or a wide panel's quarters where a test or benchmark turned AVX-512 off
  // after packing).
  constexpr int64_t kRowBlock = 8 * outer::kRows;
  constexpr int64_t kColumns = kWidePanel;
  const bool wide = panel_ == kWidePanel && use_avx512();
  const int64_t column_blocks = (out_ + kColumns - 1) / kColumns;
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t items = column_blocks * row_blocks;
  const bool parallel = threads > 1 && items > 1 && rows * out_ * in_ >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t o = (item / row_blocks) * kColumns;
    const int64_t r = (item % row_blocks) * kRowBlock;
    const int64_t n = std::min(kRowBlock, rows - r);
    const float* bias = bias_.empty() ? nullptr : bias_.data() + o;
    const int64_t width = std::min(kColumns, out_ - o);
    if (wide) {
      wide_panel_product(x + r * in_, n, in_, panels_.data() + o * in_, bias, width, y + r * out_ + o, out_);
      continue;
    }
    const int64_t slices = (width + kNarrowPanel - 1) / kNarrowPanel;
    const float* slice[kColumns / kNarrowPanel];
    for (int64_t s = 0; s < slices; ++s) {
      const int64_t so = o + s * kNarrowPanel;
      slice[s] = panels_.data() + (so / panel_) * in_ * panel_ + so % panel_;
    }
    narrow_columns_product(x + r * in_, n, in_, slice, slices, panel_, bias, width, y + r * out_ + o, out_);
  }
}

#else  // not x86-64: fp32_packed_available() is false there

Fp32PackedMatrix::Fp32PackedMatrix(const float*, int64_t, int64_t, const float*) : out_(0), in_(0), panel_(0) {
  throw std::logic_error("Fp32PackedMatrix needs AVX2 and FMA, which this build or platform lacks");
}

void Fp32PackedMatrix::multiply(const float*, int64_t, float*, int) const {}

#endif

}  // namespace srformer::kernels
