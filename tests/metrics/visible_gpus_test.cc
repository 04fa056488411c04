// visible_gpus: CUDA's device numbers under CUDA_VISIBLE_DEVICES, as NVML indices.
#include "server/metrics/visible_gpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "server/metrics/metrics.h"
#include "tests/metrics/scrape.h"

namespace srformer::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::optional<std::string> uuid_of(unsigned i) {
  const char* ids[] = {"GPU-1a2b-0000", "GPU-1a2b-1111", "GPU-9c9c-2222"};
  return i < 3 ? std::optional<std::string>(ids[i]) : std::nullopt;
}

// Sets CUDA_VISIBLE_DEVICES while it lives, then puts back what was there.
class ScopedVisibleDevices {
 public:
  explicit ScopedVisibleDevices(const char* value) {
    if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) saved_ = v;
    ::setenv("CUDA_VISIBLE_DEVICES", value, 1);
  }
  ~ScopedVisibleDevices() {
    if (saved_) {
      ::setenv("CUDA_VISIBLE_DEVICES", saved_->c_str(), 1);
    } else {
      ::unsetenv("CUDA_VISIBLE_DEVICES");
    }
  }
  ScopedVisibleDevices(const ScopedVisibleDevices&) = delete;
  ScopedVisibleDevices& operator=(const ScopedVisibleDevices&) = delete;

 private:
  std::optional<std::string> saved_;
};

TEST(VisibleGpus, UnsetShowsEveryDeviceInNvmlsOrder) {
  const auto v = visible_gpus(nullptr, 3, uuid_of);
  EXPECT_THAT(v.nvml_index, ElementsAre(0, 1, 2));
  EXPECT_THAT(v.note, IsEmpty());
}

TEST(VisibleGpus, IndicesAndUuidsInTheVariablesOrder) {
  EXPECT_THAT(visible_gpus("2,0", 3, uuid_of).nvml_index, ElementsAre(2, 0));
  EXPECT_THAT(visible_gpus(" 1 , 2", 3, uuid_of).nvml_index, ElementsAre(1, 2));
  EXPECT_THAT(visible_gpus("GPU-9c9c-2222,GPU-1a2b-0", 3, uuid_of).nvml_index, ElementsAre(2, 0));
  EXPECT_THAT(visible_gpus("GPU-9c", 3, uuid_of).nvml_index, ElementsAre(2)) << "a unique prefix";
  const auto none = visible_gpus("", 3, uuid_of);
  EXPECT_THAT(none.nvml_index, IsEmpty());
  EXPECT_THAT(none.note, IsEmpty()) << "an empty variable hides every GPU, as in CUDA";
}

TEST(VisibleGpus, AnEntryNamingNoDeviceEndsTheList) {
  for (const char* value : {"1,7,0", "1,GPU-1a2b,0", "1,MIG-abc,0", "1,x,0", "1,1,0", "1,,0", "1,99999999999,0"}) {
    SCOPED_TRACE(value);
    const auto v = visible_gpus(value, 3, uuid_of);
    EXPECT_THAT(v.nvml_index, ElementsAre(1));
    EXPECT_THAT(v.note, HasSubstr("not sampled"));
  }
  EXPECT_THAT(visible_gpus("GPU-1a2b-0000", 3, [](unsigned) { return std::nullopt; }).nvml_index, IsEmpty())
      << "no UUIDs from NVML: a UUID names nothing";
}

// The gauges carry CUDA's numbers: gpu="0" is what the process calls cuda:0.
TEST(VisibleGpus, GaugesAreNumberedAsCudaNumbersTheDevices) {
  const ScopedVisibleDevices restore("GPU-fa4e-2,1");
  auto fake = std::make_shared<testing::FakeNvml::Shared>();
  fake->devices = 3;  // utilization 0.5, 0.6, 0.7; device 1 reports no power
  Metrics metrics("");
  ASSERT_TRUE(metrics.start_gpu_monitor(std::make_unique<testing::FakeNvml>(fake)));
  const std::string text = metrics.scrape_text();
  EXPECT_DOUBLE_EQ(*testing::sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "0"}}), 0.7);
  EXPECT_DOUBLE_EQ(*testing::sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "1"}}), 0.6);
  EXPECT_FALSE(testing::sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "2"}})) << "hidden from CUDA";
  EXPECT_TRUE(testing::sample(text, "srformer_gpu_power_watts", {{"gpu", "0"}}));
  EXPECT_FALSE(testing::sample(text, "srformer_gpu_power_watts", {{"gpu", "1"}})) << "NVML's device 1";
}

// --device cuda:1 under CUDA_VISIBLE_DEVICES=2,0 is NVML's device 0: that one is sampled, labelled gpu="1",
// and NVML's device 2 (CUDA's 0, which the server does not use) is not.
TEST(VisibleGpus, TheUsedDeviceIsFoundThroughTheVariable) {
  const ScopedVisibleDevices restore("GPU-fa4e-2,0");
  auto fake = std::make_shared<testing::FakeNvml::Shared>();
  fake->devices = 3;  // utilization 0.5, 0.6, 0.7
  Metrics metrics("");
  ASSERT_TRUE(metrics.start_gpu_monitor(std::make_unique<testing::FakeNvml>(fake), {1}));
  const std::string text = metrics.scrape_text();
  EXPECT_DOUBLE_EQ(*testing::sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "1"}}), 0.5);
  EXPECT_EQ(testing::sample(text, "srformer_gpu_memory_used_bytes", {{"gpu", "1"}}), 1e9);
  EXPECT_FALSE(testing::sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "0"}})) << text;
  EXPECT_FALSE(testing::sample(text, "srformer_gpu_utilization_ratio", {{"gpu", "2"}})) << text;
}

}  // namespace
}  // namespace srformer::server
