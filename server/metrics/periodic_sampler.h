#pragma once
// A background thread calling a function at a fixed interval; stops and joins on destruction.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace srformer::server {

class PeriodicSampler {
 public:
  // Calls `sample` once per `interval` on its own thread, starting one interval from now.
  PeriodicSampler(std::chrono::milliseconds interval, std::function<void()> sample);
  ~PeriodicSampler();
  PeriodicSampler(const PeriodicSampler&) = delete;
  PeriodicSampler& operator=(const PeriodicSampler&) = delete;

 private:
  void run();

  const std::chrono::milliseconds interval_;
  const std::function<void()> sample_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after every other member is ready
};

}  // namespace srformer::server
