#pragma once
// Greedy search's per-step decision over one row of scores: the first index of the maximum and the
// log-softmax at it, in two passes over the row (LibTorch's argmax + logsumexp + indexing took ~150
// µs per request on a 32k vocabulary, ~8% of a 32-stream decode step).
// Plain C++ (no LibTorch); vectorised where kernels::avx2_fma_available().
#include <cstdint>
#include <optional>
#include <vector>

namespace srformer::kernels {

struct GreedyPick {
  int64_t token = -1;
  double logprob = 0.0;  // x[token] - log Σ exp(x), the sum in double over float exponentials
};

// x: n scores, -inf for excluded tokens. std::nullopt when the row holds a NaN or no finite score
// (the caller then uses the general path, whose results are defined for those too).
std::optional<GreedyPick> greedy_pick(const float* x, int64_t n);

// The same pick with tokens at or past `limit` and those in `excluded` (ascending; repeats allowed)
// counted as -inf, without writing them: bit for bit what greedy_pick gives on a copy of the row
// with those scores set to -inf. Only [0, limit) is read, so a model whose embedding rows outnumber
// its tokenizer's vocabulary costs the tokenizer's share. A NaN at an excluded token is ignored, as
// it would be overwritten.
std::optional<GreedyPick> greedy_pick(const float* x, int64_t n, int64_t limit, const std::vector<int64_t>& excluded);

}  // namespace srformer::kernels
