#pragma once
// y = x Wᵀ + b in fp32 for a model's projections at inference, with W repacked once (at model load) into
// panels of 16 output features: panel p holds W[16p .. 16p+15][i] for i = 0, 1, ... contiguously, so a
// product streams each panel front to back, four panels (a 64-column block) at a time: four sequential
// streams per thread for the hardware prefetchers. A block of rows x columns of partial sums held in
// registers takes every weight vector loaded: 6 x 64 in 24 AVX-512 registers (kernels/outer_product.h)
// for 4 rows and more, 1–3 rows x 32–64 in 8–12 AVX2 ones (a decode step's few rows: 8 chains in
// flight, where the AVX-512 block has 4). Against kernels::few_rows_linear (W row-major, dot products
// along the input dimension) 1.1–1.8x faster at 1–32 rows on AMD Zen 4, against OpenBLAS 1.0–1.6x at
// 64–2048 rows except an LM head at 512 rows (`srformer bench --only linear`; docs/BENCHMARKS.md).
//
// Each output is one fused multiply-add chain over i = 0, 1, ..., in-1 from zero, then + bias: the
// same operations for any number of rows, row position, thread count or instruction set, so a row's
// result does not depend on the batch around it. (The chain is sequential, where the dot-product form
// sums 8 or 16 lanes and reduces them; both are fp32 sums of the same products, differing in rounding only.)
// Plain C++ (no LibTorch). Needs AVX2 + FMA: use only where fp32_packed_available().
#include <cstddef>
#include <cstdint>
#include <vector>

namespace srformer::kernels {

// AVX2 + FMA (kernels::avx2_fma_available()) and neither the environment (SRFORMER_CPU_PACKED=0) nor
// set_fp32_packed(false) turned the packed products off (benchmarks and tests compare both; a packed
// model then multiplies through its row-major weights).
bool fp32_packed_available();
void set_fp32_packed(bool on);

class Fp32PackedMatrix {
 public:
  static constexpr int64_t kPanel = 16;         // output features per panel (one AVX-512 vector, two AVX2 ones)
  static constexpr int64_t kBlockColumns = 64;  // output features per work item: four panels

  // Packs w ([out, in] row-major); bias ([out] or null) is added after each sum. The same layout for
  // either instruction set. Throws std::logic_error where !kernels::avx2_fma_available().
  Fp32PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias);

  // y[r * out + o] = Σ_i x[r * in + i] w[o][i] + bias[o] for x [rows, in] row-major, with AVX-512 for
  // blocks of more than 3 rows where kernels::use_avx512(), else AVX2. Splits (64-column block, 48-row
  // block) pairs over `threads` OpenMP threads where the product is large enough to pay for them.
  void multiply(const float* x, int64_t rows, float* y, int threads) const;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  size_t bytes() const { return (panels_.size() + bias_.size()) * sizeof(float); }

 private:
  int64_t out_, in_;
  std::vector<float> panels_;  // [ceil(out / 64) * 4][in][16]; outputs past `out` are zeros
  std::vector<float> bias_;    // [out] or empty
};

}  // namespace srformer::kernels
