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

bool fp32_packed_available() { return use_avx512() && packed_switch().load(std::memory_order_relaxed); }
void set_fp32_packed(bool on) { packed_switch().store(on); }

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

constexpr int64_t kPanel = Fp32PackedMatrix::kPanel;
static_assert(kPanel == outer::kColumns, "a panel is one outer-product block wide");

// Rows [0, rows) of x against one panel; y points at the panel's first output of row 0. `width` (<= 64)
// outputs are written (the padding's columns are neither read nor written), then the bias added.
SRFORMER_AVX512 void panel_product(const float* x, int64_t rows, int64_t in, const float* panel, const float* bias,
                                   int64_t width, float* y, int64_t y_stride) {
  outer::product(x, in, rows, panel, kPanel, in, width, y, y_stride);
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
  constexpr int64_t kRowBlock = 8 * outer::kRows;
  const int64_t panels = (out_ + kPanel - 1) / kPanel;
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  const int64_t items = panels * row_blocks;
  const bool parallel = threads > 1 && items > 1 && rows * out_ * in_ >= kParallelMinWork;
  (void)parallel;
#pragma omp parallel for schedule(static) num_threads(threads) if (parallel)
  for (int64_t item = 0; item < items; ++item) {
    const int64_t o = (item / row_blocks) * kPanel;
    const int64_t r = (item % row_blocks) * kRowBlock;
    panel_product(x + r * in_, std::min(kRowBlock, rows - r), in_, panels_.data() + o * in_,
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
