#pragma once
// Greedy search's per-step decision over one row of scores: the first index of the maximum and the
// log-softmax at it, in two passes over the row (LibTorch's argmax + logsumexp + indexing took ~150
// µs per request on a 32k vocabulary, ~8% of a 32-stream decode step).
// Plain C++ (no LibTorch); vectorised where kernels::avx2_fma_available().
#include <cstdint>
#include <optional>

namespace srformer::kernels {

struct GreedyPick {
  int64_t token = -1;
  double logprob = 0.0;  // x[token] - log Σ exp(x), the sum in double over float exponentials
};

// x: n scores, -inf for excluded tokens. std::nullopt when the row holds a NaN or no finite score
// (the caller then uses the general path, whose results are defined for those too).
std::optional<GreedyPick> greedy_pick(const float* x, int64_t n);

}  // namespace srformer::kernels
