#include "model/kernels/greedy_pick.h"

#include <cmath>
#include <limits>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

namespace {

constexpr int64_t kChunk = 256;  // partial sums of this many terms stay in float, then go to double

std::optional<GreedyPick> pick_scalar(const float* x, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  int64_t token = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return std::nullopt;
    if (x[i] > best) {
      best = x[i];
      token = i;
    }
  }
  if (token < 0) return std::nullopt;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - best);
  return GreedyPick{token, -std::log(sum)};
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS
SRFORMER_AVX2 std::optional<GreedyPick> pick_avx2(const float* x, int64_t n) {
  // Pass 1: the maximum (and whether any NaN is present).
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vmax = _mm256_max_ps(vmax, v);
  }
  if (_mm256_movemask_ps(nan) != 0) return std::nullopt;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float best = lanes[0];
  for (int l = 1; l < 8; ++l) best = lanes[l] > best ? lanes[l] : best;
  for (int64_t j = i; j < n; ++j) {
    if (std::isnan(x[j])) return std::nullopt;
    best = x[j] > best ? x[j] : best;
  }
  if (!std::isfinite(best)) return std::nullopt;
  // The first index holding it (argmax's tie rule), then pass 2: Σ exp(x - max).
  int64_t token = 0;
  while (x[token] != best) ++token;
  const __m256 vbest = _mm256_set1_ps(best);
  double sum = 0.0;
  i = 0;
  while (i + 8 <= n) {
    __m256 acc = _mm256_setzero_ps();
    const int64_t end = i + kChunk <= n ? i + kChunk : n - (n - i) % 8;
    for (; i < end; i += 8) acc = _mm256_add_ps(acc, exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), vbest)));
    sum += static_cast<double>(horizontal_sum(acc));
  }
  for (; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - best);
  return GreedyPick{token, -std::log(sum)};
}
#endif

}  // namespace

std::optional<GreedyPick> greedy_pick(const float* x, int64_t n) {
  if (n <= 0) return std::nullopt;
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  if (avx2_fma_available()) return pick_avx2(x, n);
#endif
  return pick_scalar(x, n);
}

}  // namespace srformer::kernels
