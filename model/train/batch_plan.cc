#include "model/train/batch_plan.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <stdexcept>

namespace srformer::train {

namespace {

// std::shuffle's result depends on the standard library; this Fisher-Yates does not.
template <typename T>
void shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng() % i);
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace

std::vector<std::vector<size_t>> epoch_batches(const std::vector<TokenizedExample>& examples, int64_t batch_size,
                                               uint64_t seed, int64_t epoch) {
  if (batch_size < 1) throw std::invalid_argument("batch size must be >= 1");
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch) + 1);
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t{0});
  shuffle(order, rng);
  const auto batch = static_cast<size_t>(batch_size);
  const size_t window = 64 * batch;
  for (size_t first = 0; first < order.size(); first += window) {
    const auto end = order.begin() + static_cast<std::ptrdiff_t>(std::min(order.size(), first + window));
    std::stable_sort(order.begin() + static_cast<std::ptrdiff_t>(first), end,
                     [&](size_t a, size_t b) { return examples[a].input.size() < examples[b].input.size(); });
  }
  std::vector<std::vector<size_t>> batches;
  for (size_t first = 0; first < order.size(); first += batch) {
    const auto n = std::min(batch, order.size() - first);
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(first),
                         order.begin() + static_cast<std::ptrdiff_t>(first + n));
  }
  shuffle(batches, rng);
  return batches;
}

}  // namespace srformer::train
