#include "server/metrics/torch_memory_sampler.h"

#include <spdlog/spdlog.h>

#include <string>

namespace srformer::server {

TorchMemorySampler::TorchMemorySampler(prometheus::Registry& registry, TorchCudaMemorySource source,
                                       std::chrono::milliseconds interval)
    : source_(std::move(source)),
      allocated_(prometheus::BuildGauge()
                     .Name("srformer_torch_cuda_allocated_bytes")
                     .Help("Bytes held by live tensors in LibTorch's CUDA caching allocator.")
                     .Register(registry)),
      reserved_(prometheus::BuildGauge()
                    .Name("srformer_torch_cuda_reserved_bytes")
                    .Help("Bytes LibTorch's CUDA caching allocator reserved from the driver.")
                    .Register(registry)) {
  sample();
  if (interval.count() > 0) sampler_ = std::make_unique<PeriodicSampler>(interval, [this] { sample(); });
}

TorchMemorySampler::~TorchMemorySampler() { sampler_.reset(); }

void TorchMemorySampler::sample() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!source_) return;
  try {
    for (const TorchCudaMemory& m : source_()) {
      const std::string device = std::to_string(m.device);
      allocated_.Add({{"device", device}}).Set(m.allocated_bytes);
      reserved_.Add({{"device", device}}).Set(m.reserved_bytes);
    }
  } catch (const std::exception& e) {
    if (!warned_) spdlog::warn("metrics: torch CUDA memory source failed ({}); keeping the last values", e.what());
    warned_ = true;
  }
}

}  // namespace srformer::server
