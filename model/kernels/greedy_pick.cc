#include "model/kernels/greedy_pick.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kernels/avx2.h"

namespace srformer::kernels {

namespace {

constexpr int64_t kChunk = 256;  // partial sums of this many terms stay in float, then go to double
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Walks the excluded tokens alongside an increasing position.
class Exclusions {
 public:
  Exclusions(int64_t limit, const std::vector<int64_t>& excluded)
      : limit_(limit), begin_(excluded.data()), end_(excluded.data() + excluded.size()), next_(begin_) {}
  void rewind() { next_ = begin_; }
  // Whether token j (visited in increasing order since the last rewind) is excluded.
  bool excluded(int64_t j) {
    if (j >= limit_) return true;
    while (next_ != end_ && *next_ < j) ++next_;
    return next_ != end_ && *next_ == j;
  }
  // The first block [b, b + 8) with b >= i (both multiples of 8) holding an excluded token or reaching
  // past the limit; blocks before it can be read as they are.
  int64_t next_touched(int64_t i) {
    while (next_ != end_ && *next_ < i) ++next_;
    const int64_t at_limit = std::max<int64_t>(i, limit_ - limit_ % 8);  // the block holding the limit
    return next_ != end_ ? std::min<int64_t>(*next_ - *next_ % 8, at_limit) : at_limit;
  }
  int64_t limit() const { return limit_; }

 private:
  int64_t limit_;
  const int64_t* begin_;
  const int64_t* end_;
  const int64_t* next_;
};

std::optional<GreedyPick> pick_scalar(const float* x, int64_t n, Exclusions& ex) {
  float best = kNegInf;
  int64_t token = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (ex.excluded(i)) continue;
    if (std::isnan(x[i])) return std::nullopt;
    if (x[i] > best) {
      best = x[i];
      token = i;
    }
  }
  if (token < 0) return std::nullopt;
  // Excluded terms would add exp(-inf) = 0: skipping them leaves the sum bit for bit the same.
  double sum = 0.0;
  ex.rewind();
  for (int64_t i = 0; i < n; ++i) {
    if (!ex.excluded(i)) sum += std::exp(static_cast<double>(x[i]) - best);
  }
  return GreedyPick{token, -std::log(sum)};
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS
// Reads blocks x[i, i + 8) in increasing order with excluded entries as -inf; one comparison per
// block where the mask does not reach (the max pass does little more per block than the load).
// Holds its own walk over the exclusions: a copy reads the same blocks again from where it was taken.
struct BlockReader {
  BlockReader(const float* x, const Exclusions& exclusions) : x(x), ex(exclusions) {
    ex.rewind();
    touched = ex.next_touched(0);
  }
  const float* x;
  Exclusions ex;
  int64_t touched;
};

SRFORMER_AVX2 inline __m256 load_block(BlockReader& r, int64_t i) {
  if (i != r.touched) return _mm256_loadu_ps(r.x + i);
  alignas(32) float block[8];
  for (int l = 0; l < 8; ++l) block[l] = r.ex.excluded(i + l) ? kNegInf : r.x[i + l];
  r.touched = r.ex.next_touched(i + 8);
  return _mm256_load_ps(block);
}

#define SRFORMER_AVX512_PICK __attribute__((target("avx512f,avx512dq,avx2,fma")))

// exp_nonpositive (avx2.h) on 16 lanes: the same reduction and polynomial. The zero-masked forms
// with every lane set: GCC 12's unmasked ones trip -Wmaybe-uninitialized inside its own header.
constexpr __mmask16 kAll = 0xffff;

SRFORMER_AVX512_PICK inline __m512 exp_nonpositive512(__m512 v) {
  using C = ExpNonpositive;
  const __m512 lower = _mm512_set1_ps(C::kLower);
  const __mmask16 underflow = _mm512_cmp_ps_mask(v, lower, _CMP_LT_OQ);
  v = _mm512_maskz_max_ps(kAll, v, lower);
  const __m512 k = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(v, _mm512_set1_ps(C::kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(C::kLn2Hi), v);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(C::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(C::kTaylor[0]);
  for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(C::kTaylor[i]));
  const __m512i bits =
      _mm512_maskz_slli_epi32(kAll, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, k), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~underflow), _mm512_mul_ps(p, _mm512_castsi512_ps(bits)));
}

// Σ exp(x - m) over the blocks starting in [begin, end) on 16 lanes (pairs of 8-blocks; an odd last
// block is paired with -inf, whose exp(-inf) = +0 changes no sum), partial sums of kChunk terms in
// float, then double.
SRFORMER_AVX512_PICK double sum_exp_avx512(BlockReader& reader, int64_t begin, int64_t end, float m) {
  const __m512 vm = _mm512_set1_ps(m);
  const __m256 none = _mm256_set1_ps(kNegInf);
  double sum = 0.0;
  for (int64_t i = begin; i < end;) {
    __m512 acc = _mm512_setzero_ps();
    const int64_t part_end = std::min(i + kChunk, end);
    for (; i < part_end; i += 16) {
      const __m256 lo = load_block(reader, i);
      const __m256 hi = i + 8 < part_end ? load_block(reader, i + 8) : none;
      const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
      acc = _mm512_add_ps(acc, exp_nonpositive512(_mm512_sub_ps(v, vm)));
    }
    i = part_end;
    alignas(64) float lanes[16];  // through memory, for the same reason as above
    _mm512_store_ps(lanes, acc);
    sum += static_cast<double>(horizontal_sum(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))));
  }
  return sum;
}

// The same on 8 lanes.
SRFORMER_AVX2 double sum_exp_avx2(BlockReader& reader, int64_t begin, int64_t end, float m) {
  const __m256 vm = _mm256_set1_ps(m);
  double sum = 0.0;
  for (int64_t i = begin; i < end;) {
    __m256 acc = _mm256_setzero_ps();
    const int64_t part_end = std::min(i + kChunk, end);
    for (; i < part_end; i += 8) acc = _mm256_add_ps(acc, exp_nonpositive(_mm256_sub_ps(load_block(reader, i), vm)));
    sum += static_cast<double>(horizontal_sum(acc));
  }
  return sum;
}

// Scores per span: the span's maximum, then Σ exp(x - max) over it while it is still in L1, so the
// row comes from memory once (a 32-row step's logits, 6 MB for BART's vocabulary, are evicted from
// L3 by the LM head's weights streaming through) instead of once per pass.
constexpr int64_t kSpan = 2048;

SRFORMER_AVX2 std::optional<GreedyPick> pick_avx2(const float* x, int64_t n, Exclusions& ex) {
  // Blocks wholly at or past the limit hold only -inf: they change neither the maximum nor (adding
  // exp(-inf) = +0 to non-negative partial sums) the sum, so the spans stop there.
  const int64_t blocks_end = n - n % 8;
  const int64_t stop = ex.limit() < blocks_end ? ex.limit() : blocks_end;
  const bool wide = use_avx512();
  float best = kNegInf;  // the maximum so far; `sum` is Σ exp(x - best) so far, in double
  double sum = 0.0;
  int64_t token = -1;
  BlockReader reader(x, ex);
  for (int64_t s0 = 0; s0 < stop; s0 += kSpan) {
    const int64_t s1 = std::min(s0 + kSpan, stop);  // blocks starting in [s0, s1)
    const BlockReader span_start = reader;
    __m256 vmax = _mm256_set1_ps(kNegInf);
    __m256 nan = _mm256_setzero_ps();
    for (int64_t i = s0; i < s1; i += 8) {
      const __m256 v = load_block(reader, i);
      nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      vmax = _mm256_max_ps(vmax, v);
    }
    if (_mm256_movemask_ps(nan) != 0) return std::nullopt;
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vmax);
    float m = lanes[0];
    for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
    if (m == kNegInf) continue;  // nothing to pick here, nothing to add
    if (m == -kNegInf) return std::nullopt;
    BlockReader again = span_start;
    const double span_sum = wide ? sum_exp_avx512(again, s0, s1, m) : sum_exp_avx2(again, s0, s1, m);
    if (m > best) {
      // A new maximum: its first index in the span (argmax's tie rule), a block at a time.
      const __m256 vm = _mm256_set1_ps(m);
      BlockReader scan = span_start;
      for (int64_t i = s0; i < s1 && token < s0; i += 8) {
        const int hits = _mm256_movemask_ps(_mm256_cmp_ps(load_block(scan, i), vm, _CMP_EQ_OQ));
        if (hits != 0) token = i + __builtin_ctz(static_cast<unsigned>(hits));
      }
      sum = sum * std::exp(static_cast<double>(best) - m) + span_sum;
      best = m;
    } else {
      sum += span_sum * std::exp(static_cast<double>(m) - best);
    }
  }
  // The last n % 8 scores, one at a time.
  for (int64_t j = blocks_end; j < n; ++j) {
    if (ex.excluded(j)) continue;
    if (std::isnan(x[j])) return std::nullopt;
    if (x[j] == kNegInf) continue;  // adds exp(-inf) = +0, and would make (-inf) - (-inf) a NaN
    if (x[j] > best) {
      sum = sum * std::exp(static_cast<double>(best) - x[j]) + 1.0;
      best = x[j];
      token = j;
    } else {
      sum += std::exp(static_cast<double>(x[j]) - best);
    }
  }
  if (!std::isfinite(best)) return std::nullopt;
  return GreedyPick{token, -std::log(sum)};
}
#endif

}  // namespace

std::optional<GreedyPick> greedy_pick(const float* x, int64_t n, int64_t limit, const std::vector<int64_t>& excluded) {
  if (n <= 0) return std::nullopt;
  Exclusions ex(limit < n ? limit : n, excluded);
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  if (avx2_fma_available()) return pick_avx2(x, n, ex);
#endif
  return pick_scalar(x, n, ex);
}

std::optional<GreedyPick> greedy_pick(const float* x, int64_t n) { return greedy_pick(x, n, n, {}); }

}  // namespace srformer::kernels
