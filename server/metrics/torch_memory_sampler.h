#pragma once
// srformer_torch_cuda_{allocated,reserved}_bytes{device}, read from a callback the engine provides.
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "server/metrics/metrics.h"
#include "server/metrics/periodic_sampler.h"

namespace srformer::server {

class TorchMemorySampler {
 public:
  // interval <= 0: no background thread (call sample() yourself).
  TorchMemorySampler(prometheus::Registry& registry, TorchCudaMemorySource source, std::chrono::milliseconds interval);
  ~TorchMemorySampler();
  TorchMemorySampler(const TorchMemorySampler&) = delete;
  TorchMemorySampler& operator=(const TorchMemorySampler&) = delete;

  // Calls the source once and updates the gauges; a throwing source is logged once and skipped.
  void sample();

 private:
  std::mutex mutex_;
  const TorchCudaMemorySource source_;
  prometheus::Family<prometheus::Gauge>& allocated_;
  prometheus::Family<prometheus::Gauge>& reserved_;
  bool warned_ = false;
  std::unique_ptr<PeriodicSampler> sampler_;  // last
};

}  // namespace srformer::server
