#pragma once
// Beam search's per-step choice over its beams' rows of logits: the best candidates of
// log_softmax(x) + beam score over every row, without writing a vocabulary-sized tensor. The general
// path (a copy of the rows, LibTorch's log_softmax, a pass adding the beam scores, a heap over all
// num_beams x vocab scores) took ~300-490 µs per request and step on 32k-50k vocabularies, as much
// as the model's own share of a batched step. Here each row is read once for its normaliser
// (greedy_pick's one-read pass) and once more by a vectorised comparison against a bar that only
// the few scores able to enter the best ones pass.
// Plain C++ (no LibTorch); vectorised where kernels::avx2_fma_available().
#include <cstdint>
#include <optional>
#include <vector>

namespace srformer::kernels {

struct BeamCandidate {
  float score;    // float(x[i] - logsumexp(row)) + beam score, the normaliser in double
  int64_t index;  // row * n + token
  // The token's processed log-probability alone, float(x[i] - logsumexp(row)): HF's transition score,
  // which score less the beam score gives only to the rounding of the sum.
  float logprob = 0.0f;
};

// The best `count` candidates offered, in increasing index order, best first and ties by lower
// index: torch::topk(sorted=true)'s order. A heap whose front is the worst kept, so an offer costs
// one comparison unless it enters. Also the general path's selection (BeamSearcher over a processed
// copy of the scores), so both paths choose alike.
class BestCandidates {
 public:
  explicit BestCandidates(int64_t count);
  bool full() const { return heap_.size() == count_; }
  float worst() const { return heap_.front().score; }  // when !empty
  // Whether it was kept. An equal score never displaces a kept one (it came later: a higher index).
  bool offer(float score, int64_t index, float logprob);
  std::vector<BeamCandidate> sorted() &&;

 private:
  size_t count_;
  std::vector<BeamCandidate> heap_;
};

struct BeamRows {
  const float* x = nullptr;  // rows x n scores, row-major
  int64_t rows = 0;
  int64_t n = 0;
  const float* beam_scores = nullptr;          // one per row
  int64_t limit = 0;                           // tokens at or past it are never candidates
  std::vector<std::vector<int64_t>> excluded;  // per row (or empty): tokens that are never candidates
};

// The `count` best candidates over the rows' tokens below `limit` and not excluded, best first, ties
// by lower index (torch::topk's order, which Hugging Face's beam search relies on). The normaliser of
// each row is over all its n scores: the processors act after log_softmax in beam search. std::nullopt
// when a row holds a NaN or no finite score, or fewer than `count` finite candidates exist (the caller
// then takes the general path, whose results are defined for those too).
std::optional<std::vector<BeamCandidate>> beam_candidates(const BeamRows& rows, int64_t count);

// The general path's choice over rows x n processed log-probabilities `x` (LibTorch's log_softmax, then
// processors that change scores, as a sequence bias does): the `count` best of float(x[i] + beam score),
// best first, ties by lower index, each with x[i] as its logprob; bit for bit what BestCandidates keeps
// when offered every one in index order, but only the few scores above the bar are offered (a heap offer
// per score of 4 x 32k was most of such a step). std::nullopt where a row holds NaN or +inf, or fewer than
// `count` finite scores exist (the caller then offers them all).
std::optional<std::vector<BeamCandidate>> best_processed_candidates(const float* x, int64_t rows, int64_t n,
                                                                    const float* beam_scores, int64_t count);

}  // namespace srformer::kernels
