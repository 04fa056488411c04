#include "model/train/batch_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

namespace srformer::train {
namespace {

std::vector<TokenizedExample> examples(size_t n) {
  std::vector<TokenizedExample> out(n);
  for (size_t i = 0; i < n; ++i) out[i].input.assign(1 + (i * 7) % 13, 5);
  return out;
}

TEST(EpochBatches, EveryExampleOnceInBatchesOfTheGivenSize) {
  const auto ex = examples(103);
  const auto batches = epoch_batches(ex, 10, 3, 0);
  ASSERT_EQ(batches.size(), 11u);
  std::multiset<size_t> seen;
  size_t short_batches = 0;
  for (const auto& b : batches) {
    EXPECT_LE(b.size(), 10u);
    short_batches += b.size() < 10 ? 1 : 0;
    seen.insert(b.begin(), b.end());
  }
  EXPECT_EQ(short_batches, 1u);
  ASSERT_EQ(seen.size(), 103u);
  for (size_t i = 0; i < 103; ++i) EXPECT_EQ(seen.count(i), 1u) << i;
}

TEST(EpochBatches, APureFunctionOfSeedAndEpoch) {
  const auto ex = examples(50);
  EXPECT_EQ(epoch_batches(ex, 4, 1, 2), epoch_batches(ex, 4, 1, 2));
  EXPECT_NE(epoch_batches(ex, 4, 1, 2), epoch_batches(ex, 4, 1, 3));
  EXPECT_NE(epoch_batches(ex, 4, 1, 2), epoch_batches(ex, 4, 2, 2));
}

TEST(EpochBatches, BatchesGroupSimilarLengths) {
  const auto ex = examples(64);  // one window: sorted before batching
  for (const auto& b : epoch_batches(ex, 8, 0, 0)) {
    size_t lo = 100, hi = 0;
    for (const auto i : b) {
      lo = std::min(lo, ex[i].input.size());
      hi = std::max(hi, ex[i].input.size());
    }
    EXPECT_LE(hi - lo, 4u);
  }
}

}  // namespace
}  // namespace srformer::train
