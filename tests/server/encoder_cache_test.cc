#include "server/engine/encoder_cache.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace srformer::server {
namespace {

// [k, 4] float32 hidden states: 16 bytes a position.
torch::Tensor hidden(int64_t k, float value) { return torch::full({k, 4}, value); }

TEST(EncoderCache, FindsWhatItHoldsByExactIds) {
  EncoderCache cache(1 << 20);
  EXPECT_FALSE(cache.find({1, 2, 3}).defined());
  cache.insert({1, 2, 3}, hidden(3, 7.0f));
  const auto found = cache.find({1, 2, 3});
  ASSERT_TRUE(found.defined());
  EXPECT_TRUE(found.equal(hidden(3, 7.0f)));
  EXPECT_FALSE(cache.find({1, 2}).defined());  // a prefix is another input
  EXPECT_FALSE(cache.find({1, 2, 3, 4}).defined());
  EXPECT_FALSE(cache.find({3, 2, 1}).defined());
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), 3 * 16);
  cache.insert({1, 2, 3}, hidden(3, 9.0f));  // already held: kept as it was
  EXPECT_TRUE(cache.find({1, 2, 3}).equal(hidden(3, 7.0f)));
  EXPECT_EQ(cache.bytes(), 3 * 16);
}

TEST(EncoderCache, DropsTheLeastRecentlyUsedToStayWithinItsBound) {
  EncoderCache cache(10 * 16);  // ten positions
  cache.insert({1}, hidden(4, 1.0f));
  cache.insert({2}, hidden(4, 2.0f));
  ASSERT_TRUE(cache.find({1}).defined());  // {1} is now the most recently used
  cache.insert({3}, hidden(4, 3.0f));      // 12 positions: {2} goes
  EXPECT_TRUE(cache.find({1}).defined());
  EXPECT_FALSE(cache.find({2}).defined());
  EXPECT_TRUE(cache.find({3}).defined());
  EXPECT_EQ(cache.bytes(), 8 * 16);
  EXPECT_LE(cache.bytes(), cache.max_bytes());
  cache.insert({4}, hidden(10, 4.0f));  // exactly the bound: everything else goes
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), 10 * 16);
  cache.insert({5}, hidden(11, 5.0f));  // alone over the bound: not held, nothing dropped for it
  EXPECT_FALSE(cache.find({5}).defined());
  EXPECT_TRUE(cache.find({4}).defined());
}

TEST(EncoderCache, WithoutABoundItHoldsNothing) {
  EncoderCache cache(0);
  cache.insert({1}, hidden(1, 1.0f));
  EXPECT_FALSE(cache.find({1}).defined());
  EXPECT_EQ(cache.entries(), 0);
  EXPECT_EQ(cache.bytes(), 0);
}

TEST(EncoderCache, ManyEntriesKeepTheirOwnValues) {
  EncoderCache cache(1 << 20);
  for (int64_t i = 0; i < 500; ++i) cache.insert({i, i * 7, -i}, hidden(1 + i % 5, static_cast<float>(i)));
  for (int64_t i = 0; i < 500; ++i) {
    const auto found = cache.find({i, i * 7, -i});
    ASSERT_TRUE(found.defined()) << i;
    EXPECT_TRUE(found.equal(hidden(1 + i % 5, static_cast<float>(i)))) << i;
  }
}

TEST(EncoderCache, HoldsItsOwnCopyAndAFailedCopyLeavesItAsItWas) {
  EncoderCache cache(4 * 16);
  torch::Tensor mine = hidden(3, 1.0f);
  cache.insert({1}, mine);
  mine.fill_(2.0f);  // the caller's tensor changes, not the cache's
  EXPECT_TRUE(cache.find({1}).equal(hidden(3, 1.0f)));
  EncoderCache::fail_copies_for_testing = true;
  EXPECT_THROW(cache.insert({2}, hidden(3, 3.0f)), std::bad_alloc);
  EncoderCache::fail_copies_for_testing = false;
  EXPECT_TRUE(cache.find({1}).defined()) << "dropped to make room for an entry that was never held";
  EXPECT_FALSE(cache.find({2}).defined());
  EXPECT_EQ(cache.entries(), 1);
  EXPECT_EQ(cache.bytes(), 3 * 16);
}

}  // namespace
}  // namespace srformer::server
