#pragma once
// GPU gauges from NVML, loaded with dlopen at run time (no build or link dependency on the NVIDIA driver).
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/metrics/periodic_sampler.h"

namespace srformer::server {

// The few NVML calls we use; a fake implements this in tests. Device indices are 0..device_count()-1.
class NvmlApi {
 public:
  struct Memory {
    double used_bytes = 0;
    double total_bytes = 0;
  };
  virtual ~NvmlApi() = default;
  // Initializes NVML. Returns "" on success, else why it is unavailable (library missing, no driver, ...).
  virtual std::string init() = 0;
  virtual unsigned device_count() = 0;
  // Each reading is nullopt when the device does not support it (e.g. power on some boards).
  virtual std::optional<double> utilization_ratio(unsigned index) = 0;  // 0..1, GPU busy fraction
  virtual std::optional<Memory> memory(unsigned index) = 0;
  virtual std::optional<double> power_watts(unsigned index) = 0;
  virtual std::optional<double> temperature_celsius(unsigned index) = 0;
  virtual std::optional<double> sm_clock_hertz(unsigned index) = 0;
  // "GPU-..." as CUDA_VISIBLE_DEVICES may name it; nullopt when NVML cannot say.
  virtual std::optional<std::string> uuid(unsigned index) {
    (void)index;
    return std::nullopt;
  }
};

// NVML through dlopen("libnvidia-ml.so.1"); init() reports the dlopen/dlsym/nvmlInit error if any.
std::unique_ptr<NvmlApi> load_nvml();

// Registers srformer_gpu_* gauges{gpu="<index>"} and refreshes them every interval; if NVML fails to
// initialize, logs the reason once and registers nothing. srformer_gpu_up{gpu} is there for every sampled
// device from the start: 1 while NVML answers any of its readings, 0 once it answers none (a GPU the driver
// lost), so the readings' series going away is something an alert sees. <index> is the CUDA device number (--device
// cuda:N): the GPUs CUDA_VISIBLE_DEVICES shows this process, in its order (visible_gpus.h).
// `cuda_devices`: the CUDA device numbers the server's models run on; only those are sampled (another
// process's GPU on a shared host is not this server's to report or alert on). Empty: every visible GPU.
class GpuMonitor {
 public:
  GpuMonitor(prometheus::Registry& registry, std::unique_ptr<NvmlApi> nvml, std::chrono::milliseconds interval,
             const std::vector<unsigned>& cuda_devices = {});
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Whether NVML initialized and the gauges exist.
  bool active() const { return active_; }
  // Reads every device once and updates the gauges (also called by the sampler thread).
  void sample();

 private:
  using GaugeFamily = prometheus::Family<prometheus::Gauge>;
  // A device's gauge, present while its readings succeed: unsupported readings export no series, and one
  // that starts failing (a GPU fallen off the bus) drops its series rather than repeat its last value.
  struct LazyGauge {
    GaugeFamily* family = nullptr;
    prometheus::Gauge* gauge = nullptr;
    void set(unsigned device, const std::optional<double>& value);
  };
  struct DeviceGauges {
    unsigned cuda = 0;  // the `gpu` label
    unsigned nvml = 0;  // NVML's index of the same device
    prometheus::Gauge* up = nullptr;
    LazyGauge utilization, memory_used, memory_total, power, temperature, sm_clock;
  };

  std::mutex mutex_;  // sample() runs from the sampler thread and from Metrics::sample_now()
  std::unique_ptr<NvmlApi> nvml_;
  bool active_ = false;
  std::vector<DeviceGauges> devices_;         // the sampled devices
  std::unique_ptr<PeriodicSampler> sampler_;  // last: stops before the gauges it writes go away
};

}  // namespace srformer::server
