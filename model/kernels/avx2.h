#pragma once
// What the hand-written CPU kernels share: the run-time check for AVX2 + FMA and a horizontal sum.
// The kernels are compiled for that instruction set with a target attribute (the rest of the build
// stays generic x86-64) and are called only when the CPU has it; elsewhere callers use LibTorch.
#include <strings.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>

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

// An on/off environment switch: on unless set to "0", "false", "off" or "no" (any case; operators
// write all of them, and "false" leaving a kernel on went unnoticed).
inline bool env_not_zero(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr) return true;
  for (const char* off : {"0", "false", "off", "no"}) {
    if (strcasecmp(env, off) == 0) return false;
  }
  return true;
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

// exp(v) for v <= 0: 2^k · p(r) with k = round(v / ln 2), r = v - k ln 2 (ln 2 split in two parts
// for precision), p a degree-6 Taylor polynomial of exp on [-ln2/2, ln2/2] (relative error < 2e-7).
// Below -87 the result is 0 (exp underflows float there anyway); -inf gives 0. The constants are
// shared with the 16-lane form (greedy_pick.cc), which must compute the same function.
struct ExpNonpositive {
  static constexpr float kLower = -87.0F;
  static constexpr float kLog2e = 1.44269504088896341F;
  static constexpr float kLn2Hi = 0.693359375F;
  static constexpr float kLn2Lo = -2.12194440e-4F;
  // Horner's order: p = taylor[0]; p = p·r + taylor[i] for i = 1..6.
  static constexpr float kTaylor[7] = {1.0F / 720.0F, 1.0F / 120.0F, 1.0F / 24.0F, 1.0F / 6.0F, 0.5F, 1.0F, 1.0F};
};

SRFORMER_AVX2 inline __m256 exp_nonpositive(__m256 v) {
  using C = ExpNonpositive;
  const __m256 lower = _mm256_set1_ps(C::kLower);
  const __m256 underflow = _mm256_cmp_ps(v, lower, _CMP_LT_OQ);
  v = _mm256_max_ps(v, lower);
  const __m256 k =
      _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(C::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(C::kLn2Hi), v);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(C::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(C::kTaylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(C::kTaylor[i]));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  return _mm256_andnot_ps(underflow, e);
}
#endif

}  // namespace srformer::kernels
