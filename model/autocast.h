#pragma once
// Mixed-precision training (autocast) scopes over LibTorch's per-thread autocast state, the same on
// LibTorch 1.13 (per-device setters) and 2.x (device-typed setters).
//
// Inside an AutocastScope LibTorch runs matrix products in the lower precision (bf16, or fp16 on
// CUDA) while parameters, gradients and element-wise maths stay fp32. SRformer's recurrent state
// must not drift with the products' precision: K^T V, ||K|| and the RAF membrane are computed inside
// an Fp32Region, which turns autocast off for every device until it ends.
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

namespace srformer {

// "off" -> nullopt, "bf16" -> kBFloat16, "fp16" -> kHalf; anything else throws std::invalid_argument
// naming the choices.
std::optional<c10::ScalarType> parse_autocast(const std::string& name);

// Why autocast cannot run `dtype` on `device` ("" when it can): fp16 needs CUDA (LibTorch's CPU
// autocast is bf16 only).
std::string autocast_unsupported_reason(c10::DeviceType device, c10::ScalarType dtype);

class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool was_enabled_;
  c10::ScalarType previous_dtype_;
};

class Fp32Region {
 public:
  Fp32Region();
  ~Fp32Region();
  Fp32Region(const Fp32Region&) = delete;
  Fp32Region& operator=(const Fp32Region&) = delete;

 private:
  bool cpu_was_enabled_;
  bool cuda_was_enabled_;
};

// Whether autocast is on for `device` in this thread (for checks and tests).
bool autocast_enabled(c10::DeviceType device);

}  // namespace srformer
