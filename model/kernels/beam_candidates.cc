#include "model/kernels/beam_candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "model/kernels/avx2.h"
#include "model/kernels/greedy_pick.h"

namespace srformer::kernels {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

bool better(const BeamCandidate& a, const BeamCandidate& b) {
  return a.score > b.score || (a.score == b.score && a.index < b.index);
}

// A score x whose candidate can beat `worst` in a row with this normaliser and beam score lies
// above the bar: worst - beam + lse, lowered by a margin far above the rounding of the candidate's
// two float operations (~1e-7 relative) and of the bar itself. Only candidates above it are scored.
float bar_for(float worst, float beam, double lse) {
  const double bar = static_cast<double>(worst) - beam + lse;
  const double margin = 1e-5 * (1.0 + std::abs(static_cast<double>(worst)) + std::abs(beam) + std::abs(lse));
  return static_cast<float>(bar - margin);
}

// Calls hit(i) for every i in [0, end) with x[i] > bar or NaN, in increasing order; hit may raise the bar.
template <typename Hit>
void scan_scalar(const float* x, int64_t begin, int64_t end, const float& bar, Hit& hit) {
  for (int64_t i = begin; i < end; ++i) {
    if (!(x[i] <= bar)) hit(i);
  }
}

#ifdef SRFORMER_HAVE_AVX2_KERNELS
// The same, 32 scores per comparison round: once the bar has risen past all but a handful of the
// row's scores, a round costs four loads and compares.
template <typename Hit>
SRFORMER_AVX2 void scan_avx2(const float* x, int64_t end, const float& bar, Hit& hit) {
  const int64_t rounds_end = end - end % 32;
  for (int64_t i = 0; i < rounds_end; i += 32) {
    const __m256 vb = _mm256_set1_ps(bar);
    const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(x + i), vb, _CMP_NLE_UQ);
    const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), vb, _CMP_NLE_UQ);
    const __m256 c = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 16), vb, _CMP_NLE_UQ);
    const __m256 d = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 24), vb, _CMP_NLE_UQ);
    if (_mm256_movemask_ps(_mm256_or_ps(_mm256_or_ps(a, b), _mm256_or_ps(c, d))) != 0) {
      scan_scalar(x, i, i + 32, bar, hit);
    }
  }
  scan_scalar(x, rounds_end, end, bar, hit);
}
#endif

// scan_scalar over [0, end), 32 scores a round where the CPU has AVX2 and FMA.
template <typename Hit>
void scan(const float* x, int64_t end, const float& bar, Hit& hit) {
#ifdef SRFORMER_HAVE_AVX2_KERNELS
  if (avx2_fma_available()) {
    scan_avx2(x, end, bar, hit);
    return;
  }
#endif
  scan_scalar(x, 0, end, bar, hit);
}

}  // namespace

BestCandidates::BestCandidates(int64_t count) : count_(static_cast<size_t>(std::max<int64_t>(count, 0))) {
  heap_.reserve(count_);
}

bool BestCandidates::offer(float score, int64_t index, float logprob) {
  if (full()) {
    if (count_ == 0 || !(score > worst())) return false;
    std::pop_heap(heap_.begin(), heap_.end(), better);
    heap_.back() = {score, index, logprob};
  } else {
    heap_.push_back({score, index, logprob});
  }
  std::push_heap(heap_.begin(), heap_.end(), better);
  return true;
}

std::vector<BeamCandidate> BestCandidates::sorted() && {
  std::sort(heap_.begin(), heap_.end(), better);
  return std::move(heap_);
}

std::optional<std::vector<BeamCandidate>> beam_candidates(const BeamRows& rows, int64_t count) {
  if (count <= 0) return std::vector<BeamCandidate>{};
  const int64_t limit = std::clamp<int64_t>(rows.limit, 0, rows.n);
  BestCandidates best(count);
  for (int64_t b = 0; b < rows.rows; ++b) {
    const float* x = rows.x + b * rows.n;
    const auto pick = greedy_pick(x, rows.n);  // also rejects NaN, +inf and rows without a finite score
    if (!pick) return std::nullopt;
    const double lse = static_cast<double>(x[pick->token]) - pick->logprob;
    const float beam = rows.beam_scores[b];
    const std::vector<int64_t>* excluded =
        b < static_cast<int64_t>(rows.excluded.size()) ? &rows.excluded[static_cast<size_t>(b)] : nullptr;
    float bar = best.full() ? bar_for(best.worst(), beam, lse) : kNegInf;
    auto hit = [&](int64_t i) {
      if (excluded != nullptr && std::binary_search(excluded->begin(), excluded->end(), i)) return;
      const auto logprob = static_cast<float>(static_cast<double>(x[i]) - lse);
      if (best.offer(logprob + beam, b * rows.n + i, logprob) && best.full()) bar = bar_for(best.worst(), beam, lse);
    };
    scan(x, limit, bar, hit);
  }
  // -inf scores never pass a bar: a full heap holds finite candidates only.
  if (!best.full()) return std::nullopt;
  return std::move(best).sorted();
}

std::optional<std::vector<BeamCandidate>> best_processed_candidates(const float* x, int64_t rows, int64_t n,
                                                                    const float* beam_scores, int64_t count) {
  if (count <= 0) return std::vector<BeamCandidate>{};
  BestCandidates best(count);
  bool odd = false;  // a NaN or +inf, which BestCandidates would rank otherwise than the bar assumes
  for (int64_t b = 0; b < rows && !odd; ++b) {
    const float* row = x + b * n;
    const float beam = beam_scores[b];
    // Every score at or below the bar gives float(x + beam) below the worst kept: BestCandidates would
    // refuse it, and the heap it keeps does not depend on the refused offers.
    float bar = best.full() ? bar_for(best.worst(), beam, 0.0) : kNegInf;
    auto hit = [&](int64_t i) {
      odd = odd || !(row[i] < std::numeric_limits<float>::infinity());
      if (odd) return;
      if (best.offer(row[i] + beam, b * n + i, row[i]) && best.full()) bar = bar_for(best.worst(), beam, 0.0);
    };
    scan(row, n, bar, hit);
  }
  if (odd || !best.full()) return std::nullopt;
  return std::move(best).sorted();
}

}  // namespace srformer::kernels
