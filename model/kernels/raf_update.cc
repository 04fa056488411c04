#include "model/kernels/raf_update.h"

#include "model/kernels/avx2.h"

namespace srformer::kernels {

namespace {

// One element: the reference form (and the tail of the vector loop).
inline int64_t update_element(float& mem, float& out, float drive, float leak, float threshold) {
  float m = leak * mem;
  m = m + drive;
  const float y = m / threshold - 1.0F;
  const bool fire = y > 0.0F;
  mem = fire ? m - threshold : m;
  out = fire ? y : 0.0F;
  return fire ? 1 : 0;
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS
// Eight elements at a time without branches (the firing pattern is data-dependent, ~half the
// elements fire: a branch per element mispredicted often enough to cost ~15 ns each). Multiply,
// add and divide stay separate instructions (-ffp-contract=off for this file), so every element
// matches the scalar form and LibTorch.
SRFORMER_AVX2 int64_t update_block_avx2(const RafBlock& b, int64_t size, float leak, float threshold) {
  const __m256 vleak = _mm256_set1_ps(leak);
  const __m256 vthr = _mm256_set1_ps(threshold);
  const __m256 one = _mm256_set1_ps(1.0F);
  const __m256 zero = _mm256_setzero_ps();
  int64_t fired = 0;
  int64_t e = 0;
  for (; e + 8 <= size; e += 8) {
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(vleak, _mm256_loadu_ps(b.mem + e)), _mm256_loadu_ps(b.drive + e));
    const __m256 y = _mm256_sub_ps(_mm256_div_ps(m, vthr), one);
    const __m256 fire = _mm256_cmp_ps(y, zero, _CMP_GT_OQ);
    _mm256_storeu_ps(b.mem + e, _mm256_blendv_ps(m, _mm256_sub_ps(m, vthr), fire));
    _mm256_storeu_ps(b.out + e, _mm256_and_ps(fire, y));
    fired += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(fire)));
  }
  for (; e < size; ++e) fired += update_element(b.mem[e], b.out[e], b.drive[e], leak, threshold);
  return fired;
}
#endif

int64_t update_block(const RafBlock& b, int64_t size, float leak, float threshold) {
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  if (avx2_fma_available()) return update_block_avx2(b, size, leak, threshold);
#endif
  int64_t fired = 0;
  for (int64_t e = 0; e < size; ++e) fired += update_element(b.mem[e], b.out[e], b.drive[e], leak, threshold);
  return fired;
}

}  // namespace

void raf_accumulate_fire(const RafBlock* blocks, int64_t n, int64_t size, float leak, float threshold, int64_t* fired,
                         int threads) {
  const bool parallel = threads > 1 && n > 1 && n * size >= kParallelMinWork;
#pragma omp parallel for num_threads(threads) if (parallel) schedule(static)
  for (int64_t j = 0; j < n; ++j) fired[j] = update_block(blocks[j], size, leak, threshold);
}

}  // namespace srformer::kernels
