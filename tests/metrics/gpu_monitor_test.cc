// GpuMonitor: NVML readings reach the gauges; without NVML no GPU series exist.
#include "server/metrics/gpu_monitor.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

using testing::FakeNvml;
using testing::sample;

TEST(GpuMonitor, FakeReadingsPropagateToGauges) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->devices = 2;
  Metrics metrics("");
  ASSERT_TRUE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake)));
  const std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "0"}}), 0.5);
  EXPECT_DOUBLE_EQ(*sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "1"}}), 0.6);
  EXPECT_EQ(sample(text, "srformer_gpu_memory_used_bytes", {{"gpu", "0"}}), 1e9);
  EXPECT_EQ(sample(text, "srformer_gpu_memory_used_bytes", {{"gpu", "1"}}), 1e9 + 1);
  EXPECT_EQ(sample(text, "srformer_gpu_memory_total_bytes", {{"gpu", "1"}}), 8e9);
  EXPECT_EQ(sample(text, "srformer_gpu_power_watts", {{"gpu", "0"}}), 150.0);
  EXPECT_EQ(sample(text, "srformer_gpu_temperature_celsius", {{"gpu", "0"}}), 60.0);
  EXPECT_EQ(sample(text, "srformer_gpu_sm_clock_hertz", {{"gpu", "1"}}), 1.4e9);
  // Device 1 does not report power: it gets no series rather than a misleading 0.
  EXPECT_FALSE(sample(text, "srformer_gpu_power_watts", {{"gpu", "1"}}).has_value());
}

// On a shared host the server samples only the GPU its models run on (--device cuda:N): another process's
// full GPU is not this server's, and fired SrformerGpuMemoryHigh for it.
TEST(GpuMonitor, OnlyTheGpusTheServerUsesAreSampled) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->devices = 3;
  Metrics metrics("");
  ASSERT_TRUE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake), {2}));
  const std::string text = metrics.scrape_text();
  EXPECT_DOUBLE_EQ(*sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "2"}}), 0.7);
  EXPECT_EQ(sample(text, "srformer_gpu_memory_used_bytes", {{"gpu", "2"}}), 1e9 + 2);
  for (const char* other : {"0", "1"}) {
    EXPECT_FALSE(sample(text, "srformer_gpu_utilization_ratio", {{"gpu", other}})) << text;
    EXPECT_FALSE(sample(text, "srformer_gpu_memory_used_bytes", {{"gpu", other}})) << text;
  }
}

TEST(GpuMonitor, AUsedDeviceNvmlDoesNotShowExportsNoGpuSeries) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->devices = 2;
  Metrics metrics("");
  EXPECT_FALSE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake), {5}));
  EXPECT_EQ(metrics.scrape_text().find("srformer_gpu_"), std::string::npos);
}

// A GPU whose readings start failing (NVML_ERROR_GPU_IS_LOST after an Xid) loses its series: it repeated
// its last readings, so a lost GPU looked cool, idle and half full on the dashboard and to the alerts.
TEST(GpuMonitor, ReadingsThatStartFailingDropTheirSeries) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->devices = 2;
  Metrics metrics("");
  ASSERT_TRUE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake)));
  ASSERT_TRUE(sample(metrics.scrape_text(), "srformer_gpu_memory_used_bytes", {{"gpu", "0"}}));
  fake->lost = 0;
  metrics.sample_now();
  std::string text = metrics.scrape_text();
  for (const char* name :
       {"srformer_gpu_utilization_ratio", "srformer_gpu_memory_used_bytes", "srformer_gpu_memory_total_bytes",
        "srformer_gpu_power_watts", "srformer_gpu_temperature_celsius", "srformer_gpu_sm_clock_hertz"}) {
    EXPECT_FALSE(sample(text, name, {{"gpu", "0"}})) << name << "\n" << text;
  }
  EXPECT_DOUBLE_EQ(*sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "1"}}), 0.6);
  fake->lost = -1;  // back (a driver reset): the series return
  metrics.sample_now();
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_gpu_memory_used_bytes", {{"gpu", "0"}}), 1e9);
  EXPECT_EQ(sample(text, "srformer_gpu_power_watts", {{"gpu", "0"}}), 150.0);
}

// With its readings' series gone, nothing told an operator that a GPU the server had been sampling was lost:
// an alert on them had no series to fire on. srformer_gpu_up{gpu} stays, 0 while NVML fails to read it
// (alert SrformerGpuLost).
TEST(GpuMonitor, ALostGpuKeepsAnUpSeriesAtZero) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->devices = 2;
  Metrics metrics("");
  ASSERT_TRUE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake)));
  std::string text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_gpu_up", {{"gpu", "0"}}), 1.0) << text;
  EXPECT_EQ(sample(text, "srformer_gpu_up", {{"gpu", "1"}}), 1.0) << text;
  fake->lost = 0;
  metrics.sample_now();
  text = metrics.scrape_text();
  EXPECT_EQ(sample(text, "srformer_gpu_up", {{"gpu", "0"}}), 0.0) << text;
  EXPECT_EQ(sample(text, "srformer_gpu_up", {{"gpu", "1"}}), 1.0) << text;
  fake->lost = -1;
  metrics.sample_now();
  EXPECT_EQ(sample(metrics.scrape_text(), "srformer_gpu_up", {{"gpu", "0"}}), 1.0);
}

TEST(GpuMonitor, SamplerThreadRefreshesAtItsInterval) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  prometheus::Registry registry;
  GpuMonitor monitor(registry, std::make_unique<FakeNvml>(fake), std::chrono::milliseconds(10));
  ASSERT_TRUE(monitor.active());
  fake->celsius = 81;
  const auto gauge_value = [&registry] {
    for (const auto& family : registry.Collect()) {
      if (family.name == "srformer_gpu_temperature_celsius") return family.metric.at(0).gauge.value;
    }
    return -1.0;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (gauge_value() != 81 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(gauge_value(), 81);
}

TEST(GpuMonitor, AbsentNvmlExportsNoGpuSeries) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->init_error = "cannot load libnvidia-ml.so.1";
  Metrics metrics("");
  EXPECT_FALSE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake)));
  EXPECT_EQ(metrics.scrape_text().find("srformer_gpu_"), std::string::npos);
}

TEST(GpuMonitor, NoDevicesExportsNoGpuSeries) {
  auto fake = std::make_shared<FakeNvml::Shared>();
  fake->devices = 0;
  Metrics metrics("");
  EXPECT_FALSE(metrics.start_gpu_monitor(std::make_unique<FakeNvml>(fake)));
  EXPECT_EQ(metrics.scrape_text().find("srformer_gpu_"), std::string::npos);
}

TEST(GpuMonitor, RealNvmlMatchesThisMachine) {
  // The dlopen path itself: on a machine without the NVIDIA driver it must fail cleanly, with the reason.
  auto nvml = load_nvml();
  const std::string error = nvml->init();
  if (!error.empty()) {
    EXPECT_NE(error.find("libnvidia-ml.so.1"), std::string::npos) << error;
    Metrics metrics("");
    EXPECT_FALSE(metrics.start_gpu_monitor());
    EXPECT_EQ(metrics.scrape_text().find("srformer_gpu_"), std::string::npos);
    return;
  }
  ASSERT_GT(nvml->device_count(), 0u);
  const auto memory = nvml->memory(0);
  ASSERT_TRUE(memory.has_value());
  EXPECT_GT(memory->total_bytes, 1e9);
  EXPECT_LE(memory->used_bytes, memory->total_bytes);
  const auto util = nvml->utilization_ratio(0);
  ASSERT_TRUE(util.has_value());
  EXPECT_GE(*util, 0.0);
  EXPECT_LE(*util, 1.0);
}

}  // namespace
}  // namespace srformer::server
