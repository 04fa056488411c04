// ProcessMonitor: process_* metrics agree with independent readings of this process.
#include "server/metrics/process_monitor.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <thread>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

using testing::burn_cpu;
using testing::sample;

double task_count() {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return -1;
  double n = 0;
  while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n;
}

TEST(ProcessMonitor, StatsAgreeWithGetrusageAndProcTask) {
  burn_cpu(std::chrono::milliseconds(50));
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const ProcessStats s = read_process_stats();
  rusage after{};
  getrusage(RUSAGE_SELF, &after);
  const auto seconds = [](const rusage& r) {
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
  };
  // /proc counts in clock ticks (10 ms): allow one tick per field on either side.
  EXPECT_GT(s.cpu_seconds, 0.0);
  EXPECT_GE(s.cpu_seconds, seconds(before) - 0.021);
  EXPECT_LE(s.cpu_seconds, seconds(after) + 0.021);
  // ru_maxrss (kB) is the peak, so the current RSS cannot be much above it (the kernel's per-thread RSS counters
  // are synced lazily: allow 5%); a unit slip (pages, kB) would be off by 4x or 1024x. A gtest binary holds >1 MiB.
  EXPECT_GT(s.resident_bytes, 1024.0 * 1024.0);
  EXPECT_LE(s.resident_bytes, after.ru_maxrss * 1024.0 * 1.05);
  EXPECT_GE(s.resident_bytes, after.ru_maxrss * 1024.0 * 0.25);
  EXPECT_EQ(s.threads, task_count());
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(s.start_time_seconds, now + 1);
  EXPECT_GT(s.start_time_seconds, now - 3600) << "this test process started over an hour ago?";
}

TEST(ProcessMonitor, ThreadCountFollowsNewThreads) {
  const double base = read_process_stats().threads;
  std::thread t([] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  const double with_thread = read_process_stats().threads;
  t.join();
  EXPECT_EQ(with_thread, base + 1);
}

TEST(ProcessMonitor, ExportedThroughMetricsAndCpuCounterAdvances) {
  Metrics metrics("");
  burn_cpu(std::chrono::milliseconds(30));
  metrics.sample_now();
  const std::string first = metrics.scrape_text();
  const double cpu1 = sample(first, "process_cpu_seconds_total").value_or(-1);
  EXPECT_GT(cpu1, 0.0);
  EXPECT_GT(sample(first, "process_resident_memory_bytes").value_or(0), 0.0);
  EXPECT_GE(sample(first, "process_threads").value_or(0), 1.0);
  EXPECT_GT(sample(first, "process_start_time_seconds").value_or(0), 1.6e9);  // after 2020
  burn_cpu(std::chrono::milliseconds(100));
  metrics.sample_now();
  EXPECT_GT(sample(metrics.scrape_text(), "process_cpu_seconds_total").value_or(-1), cpu1);
}

}  // namespace
}  // namespace srformer::server
