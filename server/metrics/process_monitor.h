#pragma once
// Standard process_* metrics (CPU time, resident memory, threads, start time) read from /proc/self.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "server/metrics/periodic_sampler.h"

namespace srformer::server {

// What /proc says about this process right now.
struct ProcessStats {
  double cpu_seconds = 0;         // user + system CPU time
  double resident_bytes = 0;      // VmRSS
  double threads = 0;             // Threads
  double start_time_seconds = 0;  // Unix time the process started
};
// Reads /proc/self/stat, /proc/self/status and /proc/stat; throws std::runtime_error if /proc is unreadable.
ProcessStats read_process_stats();

class ProcessMonitor {
 public:
  // interval <= 0 disables the background thread (call sample() yourself).
  ProcessMonitor(prometheus::Registry& registry, std::chrono::milliseconds interval);
  ~ProcessMonitor();
  ProcessMonitor(const ProcessMonitor&) = delete;
  ProcessMonitor& operator=(const ProcessMonitor&) = delete;

  // Reads /proc and updates the metrics; logs (once) and keeps old values if /proc is unreadable.
  void sample();

 private:
  std::mutex mutex_;  // serializes sample(): the CPU counter advances by deltas
  prometheus::Counter& cpu_seconds_;
  prometheus::Gauge& resident_bytes_;
  prometheus::Gauge& threads_;
  prometheus::Gauge& start_time_;
  double last_cpu_seconds_ = 0;
  bool warned_ = false;
  std::unique_ptr<PeriodicSampler> sampler_;  // last
};

}  // namespace srformer::server
