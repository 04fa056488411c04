// Bf16PackedMatrix (model/kernels/bf16_linear.h): packing, rounding the inputs, choosing the backend.
//
// Layout: W in tiles of 16 outputs x 32 inputs; tile row kk holds inputs 2kk and 2kk+1 of the block for
// each of the 16 outputs, interleaved ("VNNI" order) — an AMX B tile, and for the dot-product backend
// one 512-bit operand per input pair. Inputs are rounded to bfloat16 into a zero-padded per-thread
// buffer first (rows padded to a multiple of 16, inputs to a multiple of 32).
#include "model/kernels/bf16_linear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear_backends.h"

namespace srformer::kernels {

namespace {

static_assert(Bf16PackedMatrix::kTileElems == kBf16TileElems);
constexpr int64_t kRowsPerTile = 16;
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

std::atomic<bool>& amx_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_AMX")};
  return on;
}

std::atomic<bool>& dot_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_BF16_DOT")};
  return on;
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS

#define SRFORMER_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

bool has_avx512_bf16() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  return ok;
}

__mmask16 mask_of(int64_t count) {
  return static_cast<__mmask16>(count >= 16 ? 0xffffU : count <= 0 ? 0U : (1U << count) - 1U);
}

// Each output's 32 inputs of a block are contiguous: one conversion of 32 floats gives the 16 input
// pairs that go down column n of the tile (tile row kk, as 32-bit words: pair kk of outputs 0..15).
SRFORMER_AVX512_BF16 void pack_contiguous_avx512(const float* w, int64_t out, int64_t in, int64_t out_stride,
                                                 int64_t n_blocks, int64_t k_blocks, uint16_t* tiles) {
  // Word kk of the converted row goes to tile row kk (16 words per row).
  const __m512i down = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
  for (int64_t nb = 0; nb < n_blocks; ++nb) {
    for (int64_t kb = 0; kb < k_blocks; ++kb) {
      auto* tile = reinterpret_cast<int*>(tiles + (nb * k_blocks + kb) * kBf16TileElems);
      const int64_t i0 = kb * kBf16InPerTile;
      for (int64_t n = 0; n < kBf16OutPerTile; ++n) {
        const int64_t o = nb * kBf16OutPerTile + n;
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
}

// Rows [0, rows) of x to bfloat16, each padded with zeros to `k_pad` inputs; `rows_pad` - rows
// further rows of zeros.
SRFORMER_AVX512_BF16 void convert_rows_avx512(const float* x, int64_t x_stride, int64_t rows, int64_t rows_pad,
                                              int64_t in, int64_t k_pad, uint16_t* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* src = x + r * x_stride;
    uint16_t* d = dst + r * k_pad;
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), reinterpret_cast<const __m256i&>(v));
    }
    if (i < in) {
      const __mmask16 m = mask_of(in - i);
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
      _mm256_mask_storeu_epi16(d + i, m, reinterpret_cast<const __m256i&>(v));
    }
    if (in < k_pad) std::memset(d + in, 0, static_cast<size_t>(k_pad - in) * sizeof(uint16_t));
  }
  std::memset(dst + rows * k_pad, 0, static_cast<size_t>((rows_pad - rows) * k_pad) * sizeof(uint16_t));
}

#else

bool has_avx512_bf16() { return false; }

#endif

}  // namespace

bool dot_bf16_supported() { return has_avx512_bf16(); }

bool amx_available() { return amx_supported() && amx_switch().load(std::memory_order_relaxed); }
void set_amx(bool on) { amx_switch().store(on); }

bool dot_bf16_available() { return dot_bf16_supported() && dot_switch().load(std::memory_order_relaxed); }
void set_dot_bf16(bool on) { dot_switch().store(on); }

bool cpu_bf16_available() { return amx_available() || dot_bf16_available(); }

const char* cpu_bf16_backend() {
  if (amx_available()) return "amx";
  if (dot_bf16_available()) return "avx512-bf16";
  return "none";
}

void Bf16PackedMatrix::Free::operator()(uint16_t* p) const { std::free(p); }

Bf16PackedMatrix::Bf16PackedMatrix(const float* w, int64_t out, int64_t in, const float* bias, int64_t out_stride,
                                   int64_t in_stride)
    : out_(out),
      in_(in),
      n_blocks_((out + kBf16OutPerTile - 1) / kBf16OutPerTile),
      k_blocks_((in + kBf16InPerTile - 1) / kBf16InPerTile),
      tiles_(aligned_array<uint16_t>(static_cast<size_t>(n_blocks_ * k_blocks_ * kTileElems))),
      bias_(static_cast<size_t>(n_blocks_ * kBf16OutPerTile), 0.0F) {
  if (out <= 0 || in <= 0) throw std::invalid_argument("Bf16PackedMatrix: empty weight");
  if (bias != nullptr) std::copy(bias, bias + out, bias_.begin());
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  if (in_stride == 1 && has_avx512_bf16()) {
    pack_contiguous_avx512(w, out, in, out_stride, n_blocks_, k_blocks_, tiles_.get());
    return;
  }
#endif
  for (int64_t nb = 0; nb < n_blocks_; ++nb) {
    for (int64_t kb = 0; kb < k_blocks_; ++kb) {
      uint16_t* tile = tiles_.get() + (nb * k_blocks_ + kb) * kTileElems;
      for (int64_t kk = 0; kk < kBf16InPerTile / 2; ++kk) {
        for (int64_t n = 0; n < kBf16OutPerTile; ++n) {
          for (int64_t j = 0; j < 2; ++j) {
            const int64_t o = nb * kBf16OutPerTile + n;
            const int64_t i = kb * kBf16InPerTile + 2 * kk + j;
            tile[kk * 2 * kBf16OutPerTile + 2 * n + j] =
                o < out && i < in ? to_bf16(w[o * out_stride + i * in_stride]) : 0;
          }
        }
      }
    }
  }
}

void Bf16PackedMatrix::multiply(const float* x, int64_t rows, float* y, int threads, int64_t x_stride,
                                int64_t y_stride) const {
  if (rows <= 0) return;
  if (!cpu_bf16_available()) {
    throw std::logic_error("Bf16PackedMatrix::multiply needs AMX or AVX512-BF16 (cpu_bf16_available())");
  }
  if (x_stride < in_ || y_stride < out_) throw std::invalid_argument("Bf16PackedMatrix::multiply: rows overlap");
  for (int64_t r0 = 0; r0 < rows; r0 += kRowsPerPass) {
    const int64_t n = std::min(kRowsPerPass, rows - r0);
    multiply_pass(x + r0 * x_stride, n, y + r0 * y_stride, threads, x_stride, y_stride);
  }
}

void Bf16PackedMatrix::multiply_pass(const float* x, int64_t rows, float* y, int threads, int64_t x_stride,
                                     int64_t y_stride) const {
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  const int64_t k_pad = k_blocks_ * kBf16InPerTile;
  const int64_t rows_pad = round_up(rows, kRowsPerTile);
  // The caller's buffer, reused between calls (a decode step makes dozens of these products).
  thread_local std::unique_ptr<uint16_t[], Free> buffer;
  thread_local size_t buffer_elems = 0;
  const auto need = static_cast<size_t>(rows_pad * k_pad);
  if (need > buffer_elems) {
    buffer.reset(aligned_array<uint16_t>(need));
    buffer_elems = need;
  }
  convert_rows_avx512(x, x_stride, rows, rows_pad, in_, k_pad, buffer.get());
  const bool parallel = threads > 1 && n_blocks_ > 1 && rows * out_ * in_ >= kParallelMinWork * 4;
  const Bf16Product p{buffer.get(), tiles_.get(), bias_.data(), y,        rows,
                      out_,         n_blocks_,    k_blocks_,    y_stride, parallel};
  if (amx_available()) {
    amx_product(p, threads);
  } else {
    dot_bf16_product(p, threads);
  }
#else
  (void)x, (void)rows, (void)y, (void)threads, (void)x_stride, (void)y_stride;
#endif
}

}  // namespace srformer::kernels
