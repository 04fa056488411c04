#include "server/metrics/visible_gpus.h"

#include <algorithm>
#include <cctype>

namespace srformer::server {
namespace {

std::string trimmed(const std::string& s) {
  const auto first = std::find_if_not(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
  const auto last = std::find_if_not(s.rbegin(), s.rend(), [](unsigned char c) { return std::isspace(c); }).base();
  return first < last ? std::string(first, last) : std::string();
}

// The NVML index `entry` names, if any: a whole decimal index below `count`, or the one device whose UUID
// starts with it.
std::optional<unsigned> resolve(const std::string& entry, unsigned count,
                                const std::function<std::optional<std::string>(unsigned)>& uuid) {
  if (!entry.empty() && std::all_of(entry.begin(), entry.end(), [](unsigned char c) { return std::isdigit(c); })) {
    if (entry.size() > 9) return std::nullopt;
    const auto index = static_cast<unsigned>(std::stoul(entry));
    return index < count ? std::optional<unsigned>(index) : std::nullopt;
  }
  if (entry.rfind("GPU-", 0) != 0) return std::nullopt;
  std::optional<unsigned> match;
  for (unsigned i = 0; i < count; ++i) {
    const auto id = uuid(i);
    if (!id || id->rfind(entry, 0) != 0) continue;
    if (match) return std::nullopt;  // a prefix of two UUIDs names neither
    match = i;
  }
  return match;
}

}  // namespace

VisibleGpus visible_gpus(const char* cuda_visible_devices, unsigned nvml_count,
                         const std::function<std::optional<std::string>(unsigned)>& uuid) {
  VisibleGpus out;
  if (cuda_visible_devices == nullptr) {
    for (unsigned i = 0; i < nvml_count; ++i) out.nvml_index.push_back(i);
    return out;
  }
  const std::string value = cuda_visible_devices;
  size_t begin = 0;
  while (begin <= value.size() && !value.empty()) {
    const size_t comma = std::min(value.find(',', begin), value.size());
    const std::string entry = trimmed(value.substr(begin, comma - begin));
    const auto index = resolve(entry, nvml_count, uuid);
    if (!index || std::find(out.nvml_index.begin(), out.nvml_index.end(), *index) != out.nvml_index.end()) {
      out.note = "CUDA_VISIBLE_DEVICES entry '" + entry +
                 "' names no NVML device (or one named before): " + "the GPUs after it are not sampled";
      break;
    }
    out.nvml_index.push_back(*index);
    begin = comma + 1;
  }
  return out;
}

}  // namespace srformer::server
