#include "model/autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <stdexcept>

namespace srformer {

namespace {

// LibTorch 2.4 replaced the per-device setters with device-typed ones (the old ones are deprecated).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool is_enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
c10::ScalarType get_dtype(c10::DeviceType d) { return at::autocast::get_autocast_dtype(d); }
void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
bool is_enabled(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void set_enabled(c10::DeviceType d, bool on) {
  if (d == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
  } else {
    at::autocast::set_cpu_enabled(on);
  }
}
c10::ScalarType get_dtype(c10::DeviceType d) {
  return d == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
}
void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(t);
  } else {
    at::autocast::set_autocast_cpu_dtype(t);
  }
}
#endif

c10::DeviceType checked(c10::DeviceType d) {
  if (d != c10::DeviceType::CPU && d != c10::DeviceType::CUDA) {
    throw std::invalid_argument("autocast runs on cpu or cuda devices only");
  }
  return d;
}

}  // namespace

std::optional<c10::ScalarType> parse_autocast(const std::string& name) {
  if (name == "off") return std::nullopt;
  if (name == "bf16") return c10::ScalarType::BFloat16;
  if (name == "fp16") return c10::ScalarType::Half;
  throw std::invalid_argument("autocast must be off, bf16 or fp16, got '" + name + "'");
}

std::string autocast_unsupported_reason(c10::DeviceType device, c10::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) return "";
  if (device != c10::DeviceType::CPU) return "autocast runs on cpu or cuda devices only";
  if (dtype == c10::ScalarType::Half) return "fp16 autocast needs a CUDA device (LibTorch's CPU autocast is bf16 only)";
  return "";
}

bool autocast_enabled(c10::DeviceType device) { return is_enabled(checked(device)); }

AutocastScope::AutocastScope(c10::DeviceType device, c10::ScalarType dtype)
    : device_(checked(device)), was_enabled_(is_enabled(device_)), previous_dtype_(get_dtype(device_)) {
  set_dtype(device_, dtype);
  set_enabled(device_, true);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  // The outermost scope drops the cached lower-precision copies of the weights, as torch.autocast does:
  // the next update changes them.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_enabled(device_, was_enabled_);
  set_dtype(device_, previous_dtype_);
}

Fp32Region::Fp32Region()
    : cpu_was_enabled_(is_enabled(c10::DeviceType::CPU)), cuda_was_enabled_(is_enabled(c10::DeviceType::CUDA)) {
  set_enabled(c10::DeviceType::CPU, false);
  set_enabled(c10::DeviceType::CUDA, false);
}

Fp32Region::~Fp32Region() {
  set_enabled(c10::DeviceType::CPU, cpu_was_enabled_);
  set_enabled(c10::DeviceType::CUDA, cuda_was_enabled_);
}

}  // namespace srformer
