// Delivery: requests' callbacks run off the decode thread, in the order they were posted, and none is
// ever lost (not when one throws, not after stop).
#include "server/engine/delivery.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

namespace srformer::server {
namespace {

using namespace std::chrono_literals;

TEST(Delivery, RunsJobsInPostedOrderOnAnotherThread) {
  Delivery delivery;
  std::vector<int> seen;  // written by the delivery thread only, read after wait_idle
  std::vector<std::thread::id> threads;
  for (int batch = 0; batch < 50; ++batch) {
    std::vector<Delivery::Job> jobs;
    for (int j = 0; j < 7; ++j) {
      jobs.push_back([&seen, &threads, n = batch * 7 + j] {
        seen.push_back(n);
        threads.push_back(std::this_thread::get_id());
      });
    }
    delivery.post(std::move(jobs));
    if (batch % 10 == 0) delivery.post([&seen] { seen.push_back(-1); });
  }
  ASSERT_TRUE(delivery.wait_idle(Clock::now() + 10s));
  std::vector<int> expected;
  for (int batch = 0; batch < 50; ++batch) {
    for (int j = 0; j < 7; ++j) expected.push_back(batch * 7 + j);
    if (batch % 10 == 0) expected.push_back(-1);
  }
  EXPECT_EQ(seen, expected);
  ASSERT_FALSE(threads.empty());
  for (const auto& id : threads) EXPECT_NE(id, std::this_thread::get_id());
}

TEST(Delivery, WaitIdleWaitsForTheRunningJob) {
  Delivery delivery;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> after{false};
  delivery.post([released] { released.wait(); });
  delivery.post([&after] { after = true; });
  EXPECT_FALSE(delivery.wait_idle(Clock::now() + 50ms));  // the first job still blocks the second
  EXPECT_FALSE(after);
  release.set_value();
  EXPECT_TRUE(delivery.wait_idle(Clock::now() + 10s));
  EXPECT_TRUE(after);
}

TEST(Delivery, AThrowingJobDoesNotStopTheOthers) {
  Delivery delivery;
  std::atomic<int> ran{0};
  delivery.post(
      {[] { throw std::runtime_error("callback failed"); }, [&ran] { ++ran; }, [] { throw 42; }, [&ran] { ++ran; }});
  ASSERT_TRUE(delivery.wait_idle(Clock::now() + 10s));
  EXPECT_EQ(ran, 2);
}

TEST(Delivery, StopRunsWhatIsQueuedAndLaterPostsRunInline) {
  std::atomic<int> ran{0};
  Delivery delivery;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> started;
  delivery.post([released, &started] {
    started.set_value();
    released.wait();
  });
  started.get_future().wait();  // the 100 below are queued, not taken with it
  for (int i = 0; i < 100; ++i) delivery.post([&ran] { ++ran; });
  std::thread stopper([&delivery] { delivery.stop(); });
  // The blocking job is released only once stop() has begun (a post then runs inline, here): released at
  // once, the queue mostly ran before stop() was called, and a stop() that dropped it passed.
  const auto here = std::this_thread::get_id();
  std::atomic<bool> stopping{false};
  while (!stopping) {
    delivery.post([&stopping, here] {
      if (std::this_thread::get_id() == here) stopping = true;
    });
    if (!stopping) std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(ran, 0) << "the queue waits behind the blocking job";
  release.set_value();
  stopper.join();
  EXPECT_EQ(ran, 100);  // everything queued before stop() ran before it returned
  std::thread::id where;
  delivery.post([&where] { where = std::this_thread::get_id(); });
  EXPECT_EQ(where, std::this_thread::get_id());
  EXPECT_TRUE(delivery.wait_idle(Clock::now()));
}

}  // namespace
}  // namespace srformer::server
