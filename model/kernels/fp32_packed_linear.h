#pragma once
// y = x Wᵀ + b in fp32 for a model's projections at inference, with W repacked once (at model load) into
// panels of 64 output features: panel p holds W[64p .. 64p+63][i] for i = 0, 1, ... contiguously, so a
// product streams each panel front to back (one sequential stream per thread, which the hardware
// prefetcher follows), and 6 input rows x 64 outputs of partial sums (24 AVX-512 registers) take
// every weight vector loaded (kernels/outer_product.h). Against kernels::few_rows_linear (W row-major,
// dot products along the input dimension) 1.1–1.8x faster at 1–32 rows on AMD Zen 4, against OpenBLAS
// 1.0–1.6x at 64–2048 rows except an LM head at 512 rows (`srformer bench --only linear`).
//
// Each output is one fused multiply-add chain over i = 0, 1, ..., in-1 from zero, then + bias: the
// same operations for any number of rows, row position or thread count, so a row's result does not
// depend on the batch around it. (The chain is sequential, where the dot-product form sums 16 lanes
// and reduces them; both are fp32 sums of the same products, differing in rounding only.)
// Plain C++ (no LibTorch). Needs AVX-512F: use only where fp32_packed_available().
#include <cstddef>
#include <cstdint>
#include <vector>

namespace srformer::kernels {

// AVX-512F (kernels::use_avx512()) and neither the environment (SRFORMER_CPU_PACKED=0) nor
// set_fp32_packed(false) turned the packed products off (benchmarks and tests compare both; a packed
// model then multiplies through its row-major weights).
bool fp32_packed_available();
void set_fp32_packed(bool on);

class Fp32PackedMatrix {
 public:
  static constexpr int64_t kPanel = 64;  // output features per panel (4 vectors of 16)

  // Packs w ([out, in] row-major); bias ([out] or null) is added after each sum. Throws
  // std::logic_error where !kernels::use_avx512().
  Fp32PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias);

  // y[r * out + o] = Σ_i x[r * in + i] w[o][i] + bias[o] for x [rows, in] row-major. Splits (panel,
  // 48-row block) pairs over `threads` OpenMP threads where the product is large enough to pay for them.
  void multiply(const float* x, int64_t rows, float* y, int threads) const;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  size_t bytes() const { return (panels_.size() + bias_.size()) * sizeof(float); }

 private:
  int64_t out_, in_;
  std::vector<float> panels_;  // [ceil(out / 64)][in][64]; the last panel's missing outputs are zeros, never read
  std::vector<float> bias_;    // [out] or empty
};

}  // namespace srformer::kernels
