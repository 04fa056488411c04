#pragma once
// Internal to kernels/bf16_linear.cc: the two products over Bf16PackedMatrix's layout.
#include <cstdint>

namespace srformer::kernels {

constexpr int64_t kBf16OutPerTile = 16;  // outputs per packed tile
constexpr int64_t kBf16InPerTile = 32;   // inputs per packed tile (16 pairs)
constexpr int64_t kBf16TileElems = 512;  // = Bf16PackedMatrix::kTileElems

// One product: y[r][o] = bias[o] + Σ_i a[r][i] w[o][i] for rows [0, rows), outputs [0, out).
struct Bf16Product {
  const uint16_t* a;  // bfloat16 inputs [rows rounded up to 16][k_blocks * 32], zero-padded
  const uint16_t* b;  // packed tiles [n_blocks][k_blocks]
  const float* bias;  // [n_blocks * 16]
  float* y;           // [rows, out], rows y_stride apart
  int64_t rows, out, n_blocks, k_blocks, y_stride;
  bool parallel;  // split over `threads` (false: the work is too small to wake a second thread)
};

// Each requires its backend's availability (amx_available(), dot_bf16_available()).
void amx_product(const Bf16Product& p, int threads);
void dot_bf16_product(const Bf16Product& p, int threads);

// The CPU has the instructions (and, for AMX, the OS granted the tile state); switches aside.
bool amx_supported();
bool dot_bf16_supported();

}  // namespace srformer::kernels
