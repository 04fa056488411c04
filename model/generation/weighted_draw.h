#pragma once
// One draw from a discrete distribution given by non-negative weights: how sampling and beam sampling
// pick, so that a seed gives the same draw in either.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace srformer {

struct WeightedDraw {
  int64_t index = -1;  // -1: no weight is positive, or their sum is not finite
  double total = 0.0;  // the weights' sum, in double
};

// u * total for u uniform in [0, 1) from 53 random bits: one draw of `rng`, the point of the cumulative
// weights a draw takes.
inline double draw_target(std::mt19937_64& rng, double total) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
}

// Inverse CDF in double precision: u uniform in [0, 1) from 53 random bits (one draw of `rng`, none when
// there is nothing to draw), then the first index whose cumulative weight exceeds u * total; the last
// index with weight should rounding leave that target above the final sum. weight(i) for i in [0, n).
template <typename Weight>
WeightedDraw draw_weighted(std::mt19937_64& rng, int64_t n, const Weight& weight) {
  WeightedDraw d;
  for (int64_t i = 0; i < n; ++i) d.total += weight(i);
  if (!(d.total > 0.0) || !std::isfinite(d.total)) return d;
  const double target = draw_target(rng, d.total);
  double cumulative = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double w = weight(i);
    if (w <= 0.0) continue;
    d.index = i;
    cumulative += w;
    if (cumulative > target) break;
  }
  return d;
}

// Up to `count` draws without replacement: each is draw_weighted's over `weights` with those drawn before
// set to 0 (the total summed afresh, not less the draw: subtracting a draw of ~1 would leave only rounding
// of the rest), so the same rng draws the same indices; it stops where no weight left is positive. The
// drawn indices in draw order; their weights are left at 0. draw_weighted's running sums are kept between
// draws: a draw changes none before the drawn index, so only those after it are summed again, and the first
// one above the target is found by bisection (they never fall). Two passes per draw over 4 x 32k weights
// were most of a beam sampling step.
inline std::vector<int64_t> draw_without_replacement(std::mt19937_64& rng, std::vector<double>& weights,
                                                     int64_t count) {
  const auto n = static_cast<int64_t>(weights.size());
  std::vector<int64_t> drawn;
  std::vector<double> running(weights.size());
  int64_t stale_from = 0;  // running sums from here on need summing again
  for (int64_t draw = 0; draw < count && draw < n; ++draw) {
    double sum = stale_from > 0 ? running[static_cast<size_t>(stale_from - 1)] : 0.0;
    for (int64_t i = stale_from; i < n; ++i) running[static_cast<size_t>(i)] = sum += weights[static_cast<size_t>(i)];
    const double total = running.back();
    if (!(total > 0.0) || !std::isfinite(total)) break;
    const double target = draw_target(rng, total);
    auto pick = static_cast<int64_t>(std::upper_bound(running.begin(), running.end(), target) - running.begin());
    if (pick == n) {  // rounding left the target at or above the total: the last index with weight
      do --pick;
      while (!(weights[static_cast<size_t>(pick)] > 0.0));
    }
    drawn.push_back(pick);
    weights[static_cast<size_t>(pick)] = 0.0;
    stale_from = pick;
  }
  return drawn;
}

}  // namespace srformer
