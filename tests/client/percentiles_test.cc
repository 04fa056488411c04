// The load generator's percentiles: nearest rank, as its report documents them.
#include "client/percentiles.h"

#include <gtest/gtest.h>

namespace srformer::client {
namespace {

TEST(Percentiles, NearestRankOfTheSortedValues) {
  // 1..100 in any order: the q-th percentile is the value of rank ceil(q * 100).
  std::vector<double> hundred;
  for (int i = 100; i >= 1; --i) hundred.push_back(i);
  const auto p = percentiles(hundred);
  EXPECT_EQ(p["p50"], 50.0);
  EXPECT_EQ(p["p90"], 90.0);
  EXPECT_EQ(p["p99"], 99.0);
  EXPECT_EQ(p["count"], 100);
  // Of two values p50 is the lower (an interpolation index rounded up took the upper), p90/p99 the upper.
  const auto two = percentiles({7.0, 3.0});
  EXPECT_EQ(two["p50"], 3.0);
  EXPECT_EQ(two["p90"], 7.0);
  EXPECT_EQ(two["p99"], 7.0);
  // Ten values: p99 is the largest, p90 the ninth.
  const auto ten = percentiles({1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  EXPECT_EQ(ten["p90"], 9.0);
  EXPECT_EQ(ten["p99"], 10.0);
  const auto one = percentiles({4.5});
  EXPECT_EQ(one["p50"], 4.5);
  EXPECT_EQ(one["p99"], 4.5);
}

TEST(Percentiles, NoValuesGiveNullsAndACountOfZero) {
  const auto none = percentiles({});
  EXPECT_TRUE(none["p50"].is_null());
  EXPECT_TRUE(none["p99"].is_null());
  EXPECT_EQ(none["count"], 0);
}

}  // namespace
}  // namespace srformer::client
