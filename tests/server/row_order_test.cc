#include "server/engine/row_order.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace srformer::server {
namespace {

using Order = std::vector<size_t>;

TEST(FillHolesFromTail, LastSlotsMoveIntoTheHoles) {
  // 5 slots, slot 1 left: slots 0, 2, 3 stay where they are, slot 4 takes position 1.
  EXPECT_EQ(fill_holes_from_tail({0, 2, 3, 4}), (Order{0, 3, 1, 2}));
  // Slots 0 and 2 of 5 left: slot 1 stays; 3 and 4 fill positions 0 and 2, in order.
  EXPECT_EQ(fill_holes_from_tail({1, 3, 4}), (Order{1, 0, 2}));
}

TEST(FillHolesFromTail, NothingMovesWhenOnlyTheLastLeave) {
  EXPECT_EQ(fill_holes_from_tail({0, 1, 2}), (Order{0, 1, 2}));
  EXPECT_EQ(fill_holes_from_tail({}), Order{});
  EXPECT_EQ(fill_holes_from_tail({7}), Order{0});
}

TEST(FillHolesFromTail, EveryKeptSlotAppearsOnce) {
  const std::vector<size_t> kept{2, 5, 6, 9, 10, 11};
  auto order = fill_holes_from_tail(kept);
  ASSERT_EQ(order.size(), kept.size());
  std::vector<bool> seen(kept.size(), false);
  for (size_t q = 0; q < order.size(); ++q) {
    ASSERT_LT(order[q], kept.size());
    EXPECT_FALSE(seen[order[q]]);
    seen[order[q]] = true;
    // A slot already inside the new batch keeps its position.
    if (kept[order[q]] < kept.size()) {
      EXPECT_EQ(kept[order[q]], q);
    }
  }
  EXPECT_EQ(order, (Order{2, 3, 0, 4, 5, 1}));
}

TEST(FillHolesFromTail, RejectsUnorderedPositions) {
  EXPECT_THROW(fill_holes_from_tail({2, 1}), std::invalid_argument);
  EXPECT_THROW(fill_holes_from_tail({1, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace srformer::server
