// AMX form of y = x Wᵀ + b (model/kernels/amx_linear.h).
//
// Tiles: C (fp32 sums) 16 rows x 16 outputs, A (inputs) 16 rows x 32 bfloat16, B (weights) 16 pairs of
// inputs x 16 outputs x 2 ("VNNI" order, packed once at load). A 2 x 2 block of C tiles uses all eight
// tile registers (4 C, 2 A, 2 B), so each loaded tile serves two products. Inputs are rounded to
// bfloat16 into a zero-padded buffer first; rows are padded to a multiple of 16 there and their
// results dropped, which costs nothing measurable because a few-row product is bound by streaming W.
#include "model/kernels/amx_linear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "model/kernels/avx2.h"

#if defined(SRFORMER_HAVE_AVX2_KERNELS) && defined(__linux__)
#define SRFORMER_HAVE_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace srformer::kernels {

namespace {

constexpr int64_t kRowsPerTile = 16;
constexpr int64_t kOutPerTile = 16;
constexpr int64_t kInPerTile = 32;
// Rows per pass over the weights: the bfloat16 inputs of this many rows (at most 192 KiB for 3072
// inputs) stay in L2 while every weight panel goes by once. (Chunks of up to 1 MiB of inputs, which
// read each weight 5-16x less often at 512 rows, measured no faster: the products are bound by
// loading tiles from L2, not by streaming the weights.)
constexpr int64_t kRowChunk = 32;
// Rows rounded to bfloat16 per pass: bounds the per-thread input buffer (3 MiB for 3072 inputs) whatever
// the call's size (a batch of long documents is ~100k rows).
constexpr int64_t kRowsPerPass = 512;

// Round to nearest even, as the AVX512-BF16 conversion does (NaN stays NaN).
uint16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffU) > 0x7f800000U) return static_cast<uint16_t>((u >> 16) | 0x40U);
  u += 0x7fffU + ((u >> 16) & 1U);
  return static_cast<uint16_t>(u >> 16);
}

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Uninitialised: both users (the packed tiles, the rounded inputs) write every element they read.
template <typename T>
T* aligned_array(size_t count) {
  const size_t bytes = round_up(static_cast<int64_t>(std::max<size_t>(count, 1) * sizeof(T)), 64);
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<T*>(p);
}

// Packs a weight whose inputs are contiguous (in_stride 1) with vector conversions; false where the
// CPU cannot (then the scalar loop below packs it, with the same rounding).
bool pack_contiguous(const float* w, int64_t out, int64_t in, int64_t out_stride, int64_t n_blocks, int64_t k_blocks,
                     uint16_t* tiles);

}  // namespace

void Bf16PackedMatrix::Free::operator()(uint16_t* p) const { std::free(p); }

Bf16PackedMatrix::Bf16PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias, int64_t out_stride,
                                   int64_t in_stride)
    : out_(out),
      in_(in),
      n_blocks_((out + kOutPerTile - 1) / kOutPerTile),
      k_blocks_((in + kInPerTile - 1) / kInPerTile),
      tiles_(aligned_array<uint16_t>(static_cast<size_t>(n_blocks_ * k_blocks_ * kTileElems))),
      bias_(static_cast<size_t>(n_blocks_ * kOutPerTile), 0.0F) {
  if (out <= 0 || in <= 0) throw std::invalid_argument("Bf16PackedMatrix: empty weight");
  if (bias != nullptr) std::copy(bias, bias + out, bias_.begin());
  if (in_stride == 1 && pack_contiguous(w, out, in, out_stride, n_blocks_, k_blocks_, tiles_.get())) return;
  for (int64_t nb = 0; nb < n_blocks_; ++nb) {
    for (int64_t kb = 0; kb < k_blocks_; ++kb) {
      uint16_t* tile = tiles_.get() + (nb * k_blocks_ + kb) * kTileElems;
      // Tile row kk holds inputs 2kk and 2kk+1 of the block for each of the 16 outputs, interleaved.
      for (int64_t kk = 0; kk < kInPerTile / 2; ++kk) {
        for (int64_t n = 0; n < kOutPerTile; ++n) {
          for (int64_t j = 0; j < 2; ++j) {
            const int64_t o = nb * kOutPerTile + n;
            const int64_t i = kb * kInPerTile + 2 * kk + j;
            tile[kk * 2 * kOutPerTile + 2 * n + j] = o < out && i < in ? to_bf16(w[o * out_stride + i * in_stride]) : 0;
          }
        }
      }
    }
  }
}

#ifdef SRFORMER_HAVE_AMX

#define SRFORMER_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

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

// Each output's 32 inputs of a block are contiguous: one conversion of 32 floats gives the 16 input
// pairs that go down column n of the tile (tile row kk, as 32-bit words: pair kk of outputs 0..15).
SRFORMER_AMX bool pack_contiguous(const float* w, int64_t out, int64_t in, int64_t out_stride, int64_t n_blocks,
                                  int64_t k_blocks, uint16_t* tiles) {
  static const bool can = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
  if (!can) return false;
  // Word kk of the converted row goes to tile row kk (16 words per row).
  const __m512i down = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  const auto mask_of = [](int64_t count) {
    return static_cast<__mmask16>(count >= 16 ? 0xffffU : count <= 0 ? 0U : (1U << count) - 1U);
  };
  for (int64_t nb = 0; nb < n_blocks; ++nb) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      auto* tile = reinterpret_cast<int*>(tiles + (nb * k_blocks + kb) * Bf16PackedMatrix::kTileElems);
      const int64_t i0 = kb * kInPerTile;
      for (int64_t n = 0; n < kOutPerTile; ++n) {
        const int64_t o = nb * kOutPerTile + n;
        __m512i pairs = _mm512_setzero_si512();
        if (o < out) {
          const float* src = w + o * out_stride + i0;
          const __m512 lo = _mm512_maskz_loadu_ps(mask_of(in - i0), src);
          const __m512 hi = _mm512_maskz_loadu_ps(mask_of(in - i0 - 16), src + 16);
          const __m512bh bh = _mm512_cvtne2ps_pbh(hi, lo);  // inputs 0..15 from lo, 16..31 from hi
          pairs = reinterpret_cast<const __m512i&>(bh);
        }
        _mm512_i32scatter_epi32(tile + n, down, pairs, 4);
      }
    }
  }
  return true;
}

// Rows [r0, r0 + rows) of x to bfloat16, each padded with zeros to `k_pad` inputs; `rows_pad` - rows
// further rows of zeros.
SRFORMER_AMX void convert_rows(const float* x, int64_t x_stride, int64_t rows, int64_t rows_pad, int64_t in,
                               int64_t k_pad, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * x_stride;
    uint16_t* d = dst + r * k_pad;
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), reinterpret_cast<const __m256i&>(v));
    }
    if (i < in) {
      const __mmask16 m = static_cast<__mmask16>((1U << (in - i)) - 1U);
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
      _mm256_mask_storeu_epi16(d + i, m, reinterpret_cast<const __m256i&>(v));
      i += 16;
    }
    if (in < k_pad) std::memset(d + in, 0, static_cast<size_t>(k_pad - in) * sizeof(uint16_t));
  }
  std::memset(dst + rows * k_pad, 0, static_cast<size_t>((rows_pad - rows) * k_pad) * sizeof(uint16_t));
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

struct Job {
  const uint16_t* a;  // bfloat16 inputs [rows_pad, k_pad]
  const uint16_t* b;  // packed tiles [n_blocks][k_blocks]
  const float* bias;  // [n_blocks * 16]
  float* y;           // [rows, out], rows y_stride apart
  int64_t rows, out, k_blocks, y_stride;
};

// MB x NB C tiles (MB, NB in {1, 2}) for row blocks mb.. and output blocks nb..: tiles 0-3 hold C,
// 4-5 A, 6-7 B. Every sum starts from the bias and adds the 32-input products in input order.
template <int MB, int NB>
SRFORMER_AMX void block(const Job& j, int64_t mb, int64_t nb) {
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
  const uint16_t* b0 = j.b + nb * j.k_blocks * Bf16PackedMatrix::kTileElems;
  const uint16_t* b1 = b0 + j.k_blocks * Bf16PackedMatrix::kTileElems;
  for (int64_t kb = 0; kb < j.k_blocks; ++kb) {
    _tile_loadd(4, a0 + kb * kInPerTile, a_stride);
    _tile_loadd(6, b0 + kb * Bf16PackedMatrix::kTileElems, 64);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NB == 2) {
      _tile_loadd(7, b1 + kb * Bf16PackedMatrix::kTileElems, 64);
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
SRFORMER_AMX void run_range(const Job& j, int64_t mb0, int64_t mb1, int64_t nb0, int64_t nb1) {
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

std::atomic<bool>& amx_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_AMX")};
  return on;
}

}  // namespace

bool amx_available() {
  static const bool ok = request_tile_permission();
  return ok && amx_switch().load(std::memory_order_relaxed);
}

void set_amx(bool on) { amx_switch().store(on); }

SRFORMER_AMX void Bf16PackedMatrix::multiply(const float* x, int64_t rows, float* y, int threads, int64_t x_stride,
                                             int64_t y_stride) const {
  if (rows <= 0) return;
  if (!amx_available()) throw std::logic_error("Bf16PackedMatrix::multiply needs AMX (amx_available())");
  if (x_stride < in_ || y_stride < out_) throw std::invalid_argument("Bf16PackedMatrix::multiply: rows overlap");
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerPass) {
    const int64_t n = std::min(kRowsPerPass, rows - r0);
    multiply_pass(x + r0 * x_stride, n, y + r0 * y_stride, threads, x_stride, y_stride);
  }
}

SRFORMER_AMX void Bf16PackedMatrix::multiply_pass(const float* x, int64_t rows, float* y, int threads, int64_t x_stride,
                                                  int64_t y_stride) const {
  const int64_t k_pad = k_blocks_ * kInPerTile;
  const int64_t row_blocks = (rows + kRowsPerTile - 1) / kRowsPerTile;
  const int64_t rows_pad = row_blocks * kRowsPerTile;
  // The caller's buffer, reused between calls (a decode step makes dozens of these products).
  thread_local std::unique_ptr<uint16_t[], Free> buffer;
  thread_local size_t buffer_elems = 0;
  const auto need = static_cast<size_t>(rows_pad * k_pad);
  if (need > buffer_elems) {
    buffer.reset(aligned_array<uint16_t>(need));
    buffer_elems = need;
  }
  convert_rows(x, x_stride, rows, rows_pad, in_, k_pad, buffer.get());
  const Job job{buffer.get(), tiles_.get(), bias_.data(), y, rows, out_, k_blocks_, y_stride};
  const int64_t chunk_blocks = kRowChunk / kRowsPerTile;
  const int64_t n_pairs = (n_blocks_ + 1) / 2;
  const bool parallel = threads > 1 && n_pairs > 1 && rows * out_ * in_ >= kParallelMinWork * 4;
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
    const int64_t nb0 = std::min(n_blocks_, n_pairs * t / nt * 2);
    const int64_t nb1 = std::min(n_blocks_, n_pairs * (t + 1) / nt * 2);
    if (nb0 < nb1) {
      load_tile_config();
      for (int64_t mb = 0; mb < row_blocks; mb += chunk_blocks) {
        run_range(job, mb, std::min(row_blocks, mb + chunk_blocks), nb0, nb1);
      }
      _tile_release();
    }
  }
}

#else  // no AMX on this platform: amx_available() is false and nobody multiplies

namespace {
bool pack_contiguous(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, uint16_t*) { return false; }
}  // namespace

bool amx_available() { return false; }
void set_amx(bool) {}

void Bf16PackedMatrix::multiply(const float*, int64_t, float*, int, int64_t, int64_t) const {
  throw std::logic_error("Bf16PackedMatrix::multiply needs AMX, which this build or platform lacks");
}

void Bf16PackedMatrix::multiply_pass(const float*, int64_t, float*, int, int64_t, int64_t) const {}

#endif

}  // namespace srformer::kernels
