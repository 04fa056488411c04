// AMX form of the bfloat16 product (model/kernels/bf16_linear.h).
//
// Tiles: C (fp32 sums) 16 rows x 16 outputs, A (inputs) 16 rows x 32 bfloat16, B (weights) 16 pairs of
// inputs x 16 outputs x 2 (Bf16PackedMatrix's layout). A 2 x 2 block of C tiles uses all eight tile
// registers (4 C, 2 A, 2 B), so each loaded tile serves two products. Rows are padded to a multiple of
// 16 in the rounded inputs and their results dropped, which costs nothing measurable because a few-row
// product is bound by streaming W.
#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear_backends.h"

#if defined(SRFORMER_HAVE_AVX2_KERNELS) && defined(__linux__)
#define SRFORMER_HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AMX

#define SRFORMER_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

constexpr int64_t kRowsPerTile = 16;
constexpr int64_t kOutPerTile = kBf16OutPerTile;
constexpr int64_t kInPerTile = kBf16InPerTile;
// Rows per pass over the weights: the bfloat16 inputs of this many rows (at most 192 KiB for 3072
// inputs) stay in L2 while every weight panel goes by once. (Chunks of up to 1 MiB of inputs, which
// read each weight 5-16x less often at 512 rows, measured no faster: the products are bound by
// loading tiles from L2, not by streaming the weights.)
constexpr int64_t kRowChunk = 32;

constexpr long kArchReqXcompPerm = 0x1023;  // arch_prctl: ask for an extended state component
constexpr long kXfeatureTileData = 18;      // AMX tile data

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile register: 16 rows of 64 bytes.
SRFORMER_AMX void load_tile_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
}

// Writes C tile `t` (rows m0.., outputs o0..) into y (rows `ys` apart), keeping only real rows and
// outputs. A macro: the tile intrinsics take the register number as a literal.
#define SRFORMER_STORE_TILE(t, m0, o0)                                               \
  do {                                                                               \
    if ((m0) + kRowsPerTile <= rows && (o0) + kOutPerTile <= out) {                  \
      _tile_stored(t, y + (m0)*ys + (o0), ys * static_cast<int64_t>(sizeof(float))); \
    } else {                                                                         \
      alignas(64) float tmp[kRowsPerTile * kOutPerTile];                             \
      _tile_stored(t, tmp, kOutPerTile* static_cast<int64_t>(sizeof(float)));        \
      for (int64_t r = 0; r < kRowsPerTile && (m0) + r < rows; ++r) {                \
        for (int64_t c = 0; c < kOutPerTile && (o0) + c < out; ++c)                  \
          y[((m0) + r) * ys + (o0) + c] = tmp[r * kOutPerTile + c];                  \
      }                                                                              \
    }                                                                                \
  } while (0)

// MB x NB C tiles (MB, NB in {1, 2}) for row blocks mb.. and output blocks nb..: tiles 0-3 hold C,
// 4-5 A, 6-7 B. Every sum starts from the bias and adds the 32-input products in input order.
template <int MB, int NB>
SRFORMER_AMX void block(const Bf16Product& j, int64_t mb, int64_t nb) {
  const int64_t rows = j.rows;
  const int64_t out = j.out;
  const int64_t ys = j.y_stride;
  float* y = j.y;
  const int64_t a_stride = j.k_blocks * kInPerTile * static_cast<int64_t>(sizeof(uint16_t));
  const float* bias0 = j.bias + nb * kOutPerTile;
  _tile_loadd(0, bias0, 0);  // stride 0: the bias row in all 16 rows
  if constexpr (NB == 2) _tile_loadd(1, bias0 + kOutPerTile, 0);
  if constexpr (MB == 2) {
    _tile_loadd(2, bias0, 0);
    if constexpr (NB == 2) _tile_loadd(3, bias0 + kOutPerTile, 0);
  }
  const uint16_t* a0 = j.a + mb * kRowsPerTile * j.k_blocks * kInPerTile;
  const uint16_t* a1 = a0 + kRowsPerTile * j.k_blocks * kInPerTile;
  const uint16_t* b0 = j.b + nb * j.k_blocks * kBf16TileElems;
  const uint16_t* b1 = b0 + j.k_blocks * kBf16TileElems;
  for (int64_t kb = 0; kb < j.k_blocks; ++kb) {
    _tile_loadd(4, a0 + kb * kInPerTile, a_stride);
    _tile_loadd(6, b0 + kb * kBf16TileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) {
      _tile_loadd(7, b1 + kb * kBf16TileElems, 64);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (MB == 2) {
      _tile_loadd(5, a1 + kb * kInPerTile, a_stride);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  const int64_t m0 = mb * kRowsPerTile;
  const int64_t o0 = nb * kOutPerTile;
  SRFORMER_STORE_TILE(0, m0, o0);
  if constexpr (NB == 2) SRFORMER_STORE_TILE(1, m0, o0 + kOutPerTile);
  if constexpr (MB == 2) {
    SRFORMER_STORE_TILE(2, m0 + kRowsPerTile, o0);
    if constexpr (NB == 2) SRFORMER_STORE_TILE(3, m0 + kRowsPerTile, o0 + kOutPerTile);
  }
}

// Output blocks [nb0, nb1) for row blocks [mb0, mb1).
SRFORMER_AMX void run_range(const Bf16Product& j, int64_t mb0, int64_t mb1, int64_t nb0, int64_t nb1) {
  for (int64_t nb = nb0; nb < nb1; nb += 2) {
    const bool two_n = nb + 1 < nb1;
    for (int64_t mb = mb0; mb < mb1; mb += 2) {
      const bool two_m = mb + 1 < mb1;
      if (two_m && two_n) {
        block<2, 2>(j, mb, nb);
      } else if (two_m) {
        block<2, 1>(j, mb, nb);
      } else if (two_n) {
        block<1, 2>(j, mb, nb);
      } else {
        block<1, 1>(j, mb, nb);
      }
    }
  }
}

bool request_tile_permission() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16") ||
      !__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) {
    return false;
  }
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureTileData) == 0;
}

}  // namespace

bool amx_supported() {
  static const bool ok = request_tile_permission();
  return ok;
}

SRFORMER_AMX void amx_product(const Bf16Product& p, int threads) {
  if (!amx_supported()) throw std::logic_error("amx_product needs AMX (amx_available())");
  const int64_t row_blocks = (p.rows + kRowsPerTile - 1) / kRowsPerTile;
  const int64_t chunk_blocks = kRowChunk / kRowsPerTile;
  const int64_t n_pairs = (p.n_blocks + 1) / 2;
  const bool parallel = p.parallel && n_pairs > 1;
  (void)parallel;
#pragma omp parallel num_threads(threads) if (parallel)
  {
#ifdef _OPENMP
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
#else
    const int64_t t = 0;
    const int64_t nt = 1;
#endif
    // Whole pairs of output blocks per thread, so that the blocking is the same for any thread count.
    const int64_t nb0 = std::min(p.n_blocks, n_pairs * t / nt * 2);
    const int64_t nb1 = std::min(p.n_blocks, n_pairs * (t + 1) / nt * 2);
    if (nb0 < nb1) {
      load_tile_config();
      for (int64_t mb = 0; mb < row_blocks; mb += chunk_blocks) {
        run_range(p, mb, std::min(row_blocks, mb + chunk_blocks), nb0, nb1);
      }
      _tile_release();
    }
  }
}

#else  // no AMX on this platform: amx_supported() is false and nobody calls amx_product

bool amx_supported() { return false; }

void amx_product(const Bf16Product&, int) {
  throw std::logic_error("amx_product needs AMX, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
