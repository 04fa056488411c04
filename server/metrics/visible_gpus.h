#pragma once
// Which NVML devices the process's CUDA devices are. NVML numbers every GPU in the machine; CUDA numbers
// only those CUDA_VISIBLE_DEVICES lets it see, in that variable's order. `--device cuda:N` and the
// srformer_torch_cuda_* series use CUDA's numbers, so the srformer_gpu_* series must too.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace srformer::server {

struct VisibleGpus {
  std::vector<unsigned> nvml_index;  // [CUDA ordinal] -> NVML index
  std::string note;                  // what was not followed, for a log line; "" when nothing
};

// `cuda_visible_devices`: the variable's value, nullptr when unset (every device, NVML's order). As CUDA
// reads it: comma-separated indices or UUIDs ("GPU-..." or a unique prefix of one); an entry that names
// no device, or one already named, ends the list; "" hides every device. `uuid(i)`: NVML device i's
// UUID, nullopt when unknown. MIG instances ("MIG-...") are not NVML devices: the list ends there too.
VisibleGpus visible_gpus(const char* cuda_visible_devices, unsigned nvml_count,
                         const std::function<std::optional<std::string>(unsigned)>& uuid);

}  // namespace srformer::server
