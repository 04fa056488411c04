#pragma once
// The load generator's latency summary: nearest-rank percentiles of a set of measurements.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

namespace srformer::client {

// Nearest-rank percentiles: the smallest value with at least q of the values at or below it (of two
// values, p50 is the lower; the rounded interpolation index took the upper). Empty: nulls, count 0.
inline nlohmann::json percentiles(std::vector<double> v) {
  if (v.empty()) return {{"p50", nullptr}, {"p90", nullptr}, {"p99", nullptr}, {"count", 0}};
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
  };
  return {{"p50", at(0.5)}, {"p90", at(0.9)}, {"p99", at(0.99)}, {"count", v.size()}};
}

}  // namespace srformer::client
