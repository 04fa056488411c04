// ByteGate: jobs share a byte budget; one over the whole budget runs alone.
#include "common/byte_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace srformer {
namespace {

TEST(ByteGate, AJobWaitsUntilItsBytesFitAndPassesGiveThemBack) {
  ByteGate gate(100);
  std::atomic<bool> entered{false};
  std::thread waiter;
  {
    const auto first = gate.enter(60);
    EXPECT_EQ(gate.in_use(), 60);
    const auto small = gate.enter(40);  // fits beside it
    EXPECT_EQ(gate.in_use(), 100);
    waiter = std::thread([&] {
      const auto pass = gate.enter(10);
      entered = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(entered.load()) << "10 bytes entered a full gate";
    {
      const ByteGate::Pass moved = [&] { return gate.enter(0); }();  // nothing to hold: never waits
      EXPECT_EQ(gate.in_use(), 100);
    }
  }
  waiter.join();  // first and small went: the waiter enters and leaves
  EXPECT_TRUE(entered.load());
  EXPECT_EQ(gate.in_use(), 0);
}

TEST(ByteGate, AJobOverTheBudgetRunsAloneInsteadOfWaitingForever) {
  ByteGate gate(100);
  std::atomic<bool> entered{false};
  std::thread big;
  {
    const auto held = gate.enter(1);
    big = std::thread([&] {
      const auto pass = gate.enter(5000);
      entered = true;
      EXPECT_EQ(gate.in_use(), 100);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(entered.load()) << "it entered beside another job";
  }
  big.join();
  EXPECT_TRUE(entered.load());
  EXPECT_EQ(gate.in_use(), 0);
}

}  // namespace
}  // namespace srformer
