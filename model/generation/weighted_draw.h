#pragma once
// One draw from a discrete distribution given by non-negative weights: how sampling and beam sampling
// pick, so that a seed gives the same draw in either.
#include <cmath>
#include <cstdint>
#include <random>

namespace srformer {

struct WeightedDraw {
  int64_t index = -1;  // -1: no weight is positive, or their sum is not finite
  double total = 0.0;  // the weights' sum, in double
};

// Inverse CDF in double precision: u uniform in [0, 1) from 53 random bits (one draw of `rng`, none when
// there is nothing to draw), then the first index whose cumulative weight exceeds u * total; the last
// index with weight should rounding leave that target above the final sum. weight(i) for i in [0, n).
template <typename Weight>
WeightedDraw draw_weighted(std::mt19937_64& rng, int64_t n, const Weight& weight) {
  WeightedDraw d;
  for (int64_t i = 0; i < n; ++i) d.total += weight(i);
  if (!(d.total > 0.0) || !std::isfinite(d.total)) return d;
  const double target = static_cast<double>(rng() >> 11) * 0x1.0p-53 * d.total;
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

}  // namespace srformer
