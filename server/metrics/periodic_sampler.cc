#include "server/metrics/periodic_sampler.h"

#include <spdlog/spdlog.h>

namespace srformer::server {

PeriodicSampler::PeriodicSampler(std::chrono::milliseconds interval, std::function<void()> sample)
    : interval_(interval), sample_(std::move(sample)), thread_([this] { run(); }) {}

PeriodicSampler::~PeriodicSampler() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void PeriodicSampler::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stop_; })) {
    lock.unlock();
    try {
      sample_();
    } catch (const std::exception& e) {
      // A sampler must never take the server down; the samplers log their own errors once.
      spdlog::debug("metrics: sampler error: {}", e.what());
    }
    lock.lock();
  }
}

}  // namespace srformer::server
