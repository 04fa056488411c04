#include "server/metrics/gpu_monitor.h"

#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "server/metrics/visible_gpus.h"

namespace srformer::server {
namespace {

// The subset of nvml.h we call, declared here so the build needs no NVIDIA headers (ABI stable since NVML 5).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM

class DlopenNvml final : public NvmlApi {
 public:
  ~DlopenNvml() override {
    if (initialized_ && shutdown_) shutdown_();
    if (handle_) dlclose(handle_);
  }

  std::string init() override {
    handle_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle_) {
      const char* err = dlerror();
      return std::string("cannot load libnvidia-ml.so.1 (no NVIDIA driver on this machine?): ") +
             (err ? err : "unknown error");
    }
    std::string missing;
    const auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle_, name));
      if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
    };
    sym(init_, "nvmlInit_v2");
    sym(shutdown_, "nvmlShutdown");
    sym(error_string_, "nvmlErrorString");
    sym(count_, "nvmlDeviceGetCount_v2");
    sym(handle_by_index_, "nvmlDeviceGetHandleByIndex_v2");
    sym(utilization_, "nvmlDeviceGetUtilizationRates");
    sym(memory_, "nvmlDeviceGetMemoryInfo");
    sym(power_, "nvmlDeviceGetPowerUsage");
    sym(temperature_, "nvmlDeviceGetTemperature");
    sym(clock_, "nvmlDeviceGetClockInfo");
    if (!missing.empty()) return "libnvidia-ml.so.1 lacks " + missing + " (driver too old?)";
    uuid_ = reinterpret_cast<decltype(uuid_)>(dlsym(handle_, "nvmlDeviceGetUUID"));  // optional
    const nvmlReturn_t rc = init_();
    if (rc != kNvmlSuccess) return std::string("nvmlInit failed: ") + error_string_(rc);
    initialized_ = true;
    return "";
  }

  unsigned device_count() override {
    unsigned n = 0;
    return count_(&n) == kNvmlSuccess ? n : 0;
  }

  std::optional<double> utilization_ratio(unsigned index) override {
    nvmlUtilization_t u{};
    if (!device(index) || utilization_(dev_, &u) != kNvmlSuccess) return std::nullopt;
    return u.gpu / 100.0;
  }

  std::optional<Memory> memory(unsigned index) override {
    nvmlMemory_t m{};
    if (!device(index) || memory_(dev_, &m) != kNvmlSuccess) return std::nullopt;
    return Memory{static_cast<double>(m.used), static_cast<double>(m.total)};
  }

  std::optional<double> power_watts(unsigned index) override {
    unsigned mw = 0;
    if (!device(index) || power_(dev_, &mw) != kNvmlSuccess) return std::nullopt;
    return mw / 1000.0;
  }

  std::optional<double> temperature_celsius(unsigned index) override {
    unsigned c = 0;
    if (!device(index) || temperature_(dev_, kNvmlTemperatureGpu, &c) != kNvmlSuccess) return std::nullopt;
    return static_cast<double>(c);
  }

  std::optional<double> sm_clock_hertz(unsigned index) override {
    unsigned mhz = 0;
    if (!device(index) || clock_(dev_, kNvmlClockSm, &mhz) != kNvmlSuccess) return std::nullopt;
    return mhz * 1e6;
  }

  std::optional<std::string> uuid(unsigned index) override {
    char id[96] = {};  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
    if (!uuid_ || !device(index) || uuid_(dev_, id, sizeof(id)) != kNvmlSuccess) return std::nullopt;
    return std::string(id);
  }

 private:
  // Resolves the handle of `index` into dev_ (callers are serialized by GpuMonitor::sample's single thread).
  bool device(unsigned index) { return handle_by_index_(index, &dev_) == kNvmlSuccess; }

  void* handle_ = nullptr;
  bool initialized_ = false;
  nvmlDevice_t dev_ = nullptr;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  const char* (*error_string_)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*count_)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_by_index_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*utilization_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*temperature_)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*clock_)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned) = nullptr;
};

}  // namespace

std::unique_ptr<NvmlApi> load_nvml() { return std::make_unique<DlopenNvml>(); }

GpuMonitor::GpuMonitor(prometheus::Registry& registry, std::unique_ptr<NvmlApi> nvml,
                       std::chrono::milliseconds interval, const std::vector<unsigned>& cuda_devices)
    : nvml_(std::move(nvml)) {
  const std::string error = nvml_ ? nvml_->init() : "no NVML implementation given";
  if (!error.empty()) {
    spdlog::info("metrics: GPU metrics disabled: {}", error);
    return;
  }
  if (nvml_->device_count() == 0) {
    spdlog::info("metrics: GPU metrics disabled: NVML sees no GPU");
    return;
  }
  const char* visible_env = std::getenv("CUDA_VISIBLE_DEVICES");
  auto visible = visible_gpus(visible_env, nvml_->device_count(), [this](unsigned i) { return nvml_->uuid(i); });
  if (!visible.note.empty()) spdlog::warn("metrics: {}", visible.note);
  const std::vector<unsigned>& nvml_index = visible.nvml_index;  // [CUDA device number] -> NVML's
  const auto visible_count = static_cast<unsigned>(nvml_index.size());
  if (visible_count == 0) {
    spdlog::info("metrics: GPU metrics disabled: CUDA_VISIBLE_DEVICES shows this process no GPU");
    return;
  }
  std::vector<unsigned> sampled;
  for (const unsigned d : cuda_devices) {
    if (d >= visible_count) {
      spdlog::warn("metrics: not sampling GPU cuda:{}: NVML shows this process {} GPU(s)", d, visible_count);
    } else if (std::find(sampled.begin(), sampled.end(), d) == sampled.end()) {
      sampled.push_back(d);
    }
  }
  if (cuda_devices.empty()) {
    for (unsigned d = 0; d < visible_count; ++d) sampled.push_back(d);
  }
  if (sampled.empty()) {
    spdlog::info("metrics: GPU metrics disabled: no GPU the server uses is one NVML shows");
    return;
  }
  const auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
  };
  auto& up = gauge("srformer_gpu_up",
                   "1 while NVML answers any reading of the GPU, 0 once it answers none (a GPU the driver lost: "
                   "its other srformer_gpu_* series are then absent).");
  auto& util = gauge("srformer_gpu_utilization_ratio", "Fraction of the last sample period the GPU was busy.");
  auto& used = gauge("srformer_gpu_memory_used_bytes", "GPU memory in use (all processes).");
  auto& total = gauge("srformer_gpu_memory_total_bytes", "GPU memory installed.");
  auto& power = gauge("srformer_gpu_power_watts", "GPU board power draw.");
  auto& temp = gauge("srformer_gpu_temperature_celsius", "GPU core temperature.");
  auto& clock = gauge("srformer_gpu_sm_clock_hertz", "GPU SM clock.");
  std::string numbering;
  for (const unsigned d : sampled) {
    auto& device_up = up.Add({{"gpu", std::to_string(d)}});
    devices_.push_back(
        DeviceGauges{d, nvml_index[d], &device_up, {&util}, {&used}, {&total}, {&power}, {&temp}, {&clock}});
    numbering += (numbering.empty() ? "" : ", ") + std::string("gpu ") + std::to_string(d);
    if (visible_env != nullptr) numbering += " (NVML's " + std::to_string(nvml_index[d]) + ")";
  }
  active_ = true;
  spdlog::info("metrics: sampling {} via NVML every {} ms", numbering, interval.count());
  sample();
  if (interval.count() > 0) sampler_ = std::make_unique<PeriodicSampler>(interval, [this] { sample(); });
}

GpuMonitor::~GpuMonitor() { sampler_.reset(); }

void GpuMonitor::LazyGauge::set(unsigned device, const std::optional<double>& value) {
  if (!value) {
    if (gauge) family->Remove(gauge);
    gauge = nullptr;
    return;
  }
  if (!gauge) gauge = &family->Add({{"gpu", std::to_string(device)}});
  gauge->Set(*value);
}

void GpuMonitor::sample() {
  if (!active_) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  for (DeviceGauges& g : devices_) {
    const unsigned d = g.cuda;
    const unsigned i = g.nvml;
    const auto utilization = nvml_->utilization_ratio(i);
    const auto m = nvml_->memory(i);
    const auto power = nvml_->power_watts(i);
    const auto temperature = nvml_->temperature_celsius(i);
    const auto sm_clock = nvml_->sm_clock_hertz(i);
    // Up while any reading answers: a board that lacks one (power) is not lost, a lost GPU answers none.
    g.up->Set(utilization || m || power || temperature || sm_clock ? 1 : 0);
    g.utilization.set(d, utilization);
    g.memory_used.set(d, m ? std::optional<double>(m->used_bytes) : std::nullopt);
    g.memory_total.set(d, m ? std::optional<double>(m->total_bytes) : std::nullopt);
    g.power.set(d, power);
    g.temperature.set(d, temperature);
    g.sm_clock.set(d, sm_clock);
  }
}

}  // namespace srformer::server
