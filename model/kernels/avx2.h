#pragma once
// What the hand-written CPU kernels share: the run-time check for AVX2 + FMA and a horizontal sum.
// The kernels are compiled for that instruction set with a target attribute (the rest of the build
// stays generic x86-64) and are called only when the CPU has it; elsewhere callers use LibTorch.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SRFORMER_HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#define SRFORMER_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace srformer::kernels {

// True when this CPU runs the AVX2 + FMA kernels (x86-64 only).
inline bool avx2_fma_available() {
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

// An on/off environment switch: on unless set to "0".
inline bool env_not_zero(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::strcmp(env, "0") != 0;
}

// True when this CPU also has AVX-512F (the projection kernel then uses 512-bit registers).
inline bool avx512_available() {
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  static const bool ok = avx2_fma_available() && __builtin_cpu_supports("avx512f");
  return ok;
#else
  return false;
#endif
}

// Whether the projection kernel may use AVX-512 where the CPU has it: yes unless the environment
// says SRFORMER_CPU_AVX512=0 or set_avx512(false) was called (tests run both instruction sets).
inline std::atomic<bool>& avx512_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_AVX512")};
  return on;
}
inline void set_avx512(bool on) { avx512_switch().store(on); }
inline bool use_avx512() { return avx512_available() && avx512_switch().load(std::memory_order_relaxed); }

// Whether the model layers use the kernels where they apply: on AVX2 + FMA CPUs unless the
// environment says SRFORMER_CPU_KERNELS=0, or set_cpu_kernels(false) was called (benchmarks compare both).
inline std::atomic<bool>& cpu_kernels_switch() {
  static std::atomic<bool> on{env_not_zero("SRFORMER_CPU_KERNELS")};
  return on;
}
inline void set_cpu_kernels(bool on) { cpu_kernels_switch().store(on); }
inline bool use_cpu_kernels() { return avx2_fma_available() && cpu_kernels_switch().load(std::memory_order_relaxed); }

// A second OpenMP thread pays off from about this many multiply-adds (waking it costs more below).
constexpr int64_t kParallelMinWork = int64_t{1} << 16;

#ifdef SRFORMER_HAVE_AVX2_KERNELS
SRFORMER_AVX2 inline float horizontal_sum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace srformer::kernels
