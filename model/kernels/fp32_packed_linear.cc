#include "model/kernels/fp32_packed_linear.h"

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

namespace {
std::atomic<bool>& packed_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_PACKED")};
  return on;
}
}  // namespace

bool fp32_packed_available() { return use_avx512() && packed_switch().load(std::memory_order_relaxed); }
void set_fp32_packed(bool on) { packed_switch().store(on); }

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

#define SRFORMER_AVX512 __attribute__((target("avx512f,avx2,fma")))

constexpr int64_t kPanel = Fp32PackedMatrix::kPanel;
constexpr int kRows = 6;  // input rows per register block: 6 x 4 accumulators + 4 weight vectors

// Rows [0, B) of x against one panel over the whole input dimension; y points at the panel's first
// output of row 0. `width` (<= 64) outputs are stored; the panel's padding is computed and dropped.
template <int B>
SRFORMER_AVX512 void panel_rows(const float* x, int64_t in, const float* panel, const float* bias, int64_t width,
                                float* y, int64_t y_stride) {
  __m512 acc[B][4];
#pragma GCC unroll 6
  for (int b = 0; b < B; ++b) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[b][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < in; ++i) {
    const float* w = panel + i * kPanel;
    const __m512 w0 = _mm512_loadu_ps(w), w1 = _mm512_loadu_ps(w + 16), w2 = _mm512_loadu_ps(w + 32),
                 w3 = _mm512_loadu_ps(w + 48);
#pragma GCC unroll 6
    for (int b = 0; b < B; ++b) {
      const __m512 xb = _mm512_set1_ps(x[b * in + i]);
      acc[b][0] = _mm512_fmadd_ps(xb, w0, acc[b][0]);
      acc[b][1] = _mm512_fmadd_ps(xb, w1, acc[b][1]);
      acc[b][2] = _mm512_fmadd_ps(xb, w2, acc[b][2]);
      acc[b][3] = _mm512_fmadd_ps(xb, w3, acc[b][3]);
    }
  }
  for (int b = 0; b < B; ++b) {
    float* yb = y + b * y_stride;
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const int64_t n = std::min<int64_t>(16, width - 16 * c);
      if (n <= 0) break;
      const auto mask = static_cast<__mmask16>((1U << n) - 1U);
      __m512 v = acc[b][c];
      if (bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, bias + 16 * c));
      _mm512_mask_storeu_ps(yb + 16 * c, mask, v);
    }
  }
}

SRFORMER_AVX512 void panel_all_rows(const float* x, int64_t rows, int64_t in, const float* panel, const float* bias,
                                    int64_t width, float* y, int64_t out) {
  int64_t r = 0;
  for (; r + kRows <= rows; r += kRows) panel_rows<kRows>(x + r * in, in, panel, bias, width, y + r * out, out);
  const float* xr = x + r * in;
  float* yr = y + r * out;
  switch (rows - r) {
    case 5:
      panel_rows<5>(xr, in, panel, bias, width, yr, out);
      break;
    case 4:
      panel_rows<4>(xr, in, panel, bias, width, yr, out);
      break;
    case 3:
      panel_rows<3>(xr, in, panel, bias, width, yr, out);
      break;
    case 2:
      panel_rows<2>(xr, in, panel, bias, width, yr, out);
      break;
    case 1:
      panel_rows<1>(xr, in, panel, bias, width, yr, out);
      break;
    default:
      break;
  }
}

}  // namespace

Fp32PackedMatrix::Fp32PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias) : out_(out), in_(in) {
  if (!use_avx512()) throw std::logic_error("Fp32PackedMatrix needs AVX-512F (kernels::use_avx512())");
  if (out < 0 || in < 0) throw std::invalid_argument("Fp32PackedMatrix: negative shape");
  const int64_t panels = (out + kPanel - 1) / kPanel;
  panels_.assign(static_cast<size_t>(panels * in * kPanel), 0.0F);
  for (int64_t o = 0; o < out; ++o) {
    float* dst = panels_.data() + (o / kPanel) * in * kPanel + o % kPanel;
    const float* src = w + o * in;
    for (int64_t i = 0; i < in; ++i) dst[i * kPanel] = src[i];
  }
  if (bias != nullptr) bias_.assign(bias, bias + out);
}

void Fp32PackedMatrix::multiply(const float* x, int64_t rows, float* y, int threads) const {
  // Work items: (panel, block of up to kRowBlock rows), panel-major, so that a thread's items share a panel
  // (it stays in L2 while its row blocks pass) and many rows (an encoder's) spread over more threads than
  // there are panels. Which block a row falls in changes nothing in its arithmetic.
  constexpr int64_t kRowBlock = 8 * kRows;
  const int64_t panels = (out_ + kPanel - 1) / kPanel;
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t items = panels * row_blocks;
  const bool parallel = threads > 1 && items > 1 && rows * out_ * in_ >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t o = (item / row_blocks) * kPanel;
    const int64_t r = (item % row_blocks) * kRowBlock;
    panel_all_rows(x + r * in_, std::min(kRowBlock, rows - r), in_, panels_.data() + o * in_,
                   bias_.empty() ? nullptr : bias_.data() + o, std::min(kPanel, out_ - o), y + r * out_ + o, out_);
  }
}

#else  // not x86-64: fp32_packed_available() is false there

Fp32PackedMatrix::Fp32PackedMatrix(const float*, int64_t, int64_t, const float*) : out_(0), in_(0) {
  throw std::logic_error("Fp32PackedMatrix needs AVX-512F, which this build or platform lacks");
}

void Fp32PackedMatrix::multiply(const float*, int64_t, float*, int) const {}

#endif

}  // namespace srformer::kernels
