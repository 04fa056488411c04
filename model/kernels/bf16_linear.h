#pragma once
// y = x Wᵀ + b with W held in bfloat16 (`--dtype bf16` on the CPU). The input rows are rounded to
// bfloat16 on the way in, products are summed in fp32 and y is fp32: the error is bfloat16's (8 bits
// of mantissa in each factor), while the weights are half the bytes to stream and the CPU's bfloat16
// units do more multiply-adds per cycle than its fp32 ones. Two backends share one packed layout:
//  * Intel AMX tiles (Sapphire Rapids and newer; kernels/amx_linear.cc), ~2 TFLOP/s per core;
//  * AVX512-BF16 dot products (`vdpbf16ps`: AMD Zen 4 and newer, Intel Cooper Lake;
//    kernels/dot_bf16_linear.cc), twice the multiply-adds of an fp32 FMA per instruction.
// AMX is used where available, else AVX512-BF16.
//
// Each output element is summed over the input dimension in the same order whatever the number of
// rows or threads, so a sequence's projections are bit-identical alone or inside any batch (on one
// backend: the two backends round their partial sums differently).
// Plain C++ (no LibTorch). Use only where cpu_bf16_available().
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace srformer::kernels {

// True when this CPU has AMX-BF16 and AVX512-BF16, the operating system granted this process the
// tile state (Linux 5.16+, arch_prctl ARCH_REQ_XCOMP_PERM; asked once), and neither the environment
// (SRFORMER_CPU_AMX=0) nor set_amx(false) turned it off.
bool amx_available();
// Tests use it to see what a CPU without AMX does.
void set_amx(bool on);

// True when this CPU has AVX-512F, BW and BF16 and neither the environment (SRFORMER_CPU_BF16_DOT=0)
// nor set_dot_bf16(false) turned the dot-product backend off.
bool dot_bf16_available();
void set_dot_bf16(bool on);

// Either backend: bf16 models can load on this CPU.
bool cpu_bf16_available();

// Which backend multiplies now ("amx", "avx512-bf16" or "none"), for logs and benchmarks.
const char* cpu_bf16_backend();

class Bf16PackedMatrix {
 public:
  // Packs w ([out, in] row-major fp32, rounded to nearest even) into the tile layout; bias ([out] or null)
  // is kept in fp32 and starts every sum.
  Bf16PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias)
      : Bf16PackedMatrix(w, out, in, bias, in, 1) {}
  // w[o][i] at w[o * out_stride + i * in_stride] (e.g. the transpose of a row-major matrix).
  Bf16PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias, int64_t out_stride, int64_t in_stride);

  // y[r * out + o] = Σ_j x[r * in + j] w[o * in + j] + bias[o] for x [rows, in] row-major. Splits the
  // output features over `threads` OpenMP threads. Requires cpu_bf16_available().
  void multiply(const float* x, int64_t rows, float* y, int threads) const { multiply(x, rows, y, threads, in_, out_); }
  // The same with row r of x at x + r * x_stride and of y at y + r * y_stride (e.g. one head's columns
  // of a [T, heads * d] matrix).
  void multiply(const float* x, int64_t rows, float* y, int threads, int64_t x_stride, int64_t y_stride) const;

  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  size_t bytes() const { return n_blocks_ * k_blocks_ * kTileElems * sizeof(uint16_t) + bias_.size() * sizeof(float); }

  // 16 rows of 32 bfloat16 (16 output features x 2 neighbouring inputs per row): one AMX B tile, and
  // each row one 512-bit operand of `vdpbf16ps`.
  static constexpr int64_t kTileElems = 512;

 private:
  // Up to kRowsPerPass rows.
  void multiply_pass(const float* x, int64_t rows, float* y, int threads, int64_t x_stride, int64_t y_stride) const;

  struct Free {
    void operator()(uint16_t* p) const;
  };
  int64_t out_, in_;
  int64_t n_blocks_;                         // output features / 16, rounded up
  int64_t k_blocks_;                         // inputs / 32, rounded up
  std::unique_ptr<uint16_t[], Free> tiles_;  // [n_blocks][k_blocks] tiles, zero-padded
  std::vector<float> bias_;                  // [n_blocks * 16], zeros without a bias
};

}  // namespace srformer::kernels
