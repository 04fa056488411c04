#pragma once
// Byte counts as people read them in logs and error messages: "512 bytes", "3.4 MiB", "12 GiB".
#include <array>
#include <cstdint>
#include <cstdio>
#include <string>

namespace srformer {

inline std::string format_bytes(int64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  size_t unit = 0;
  while ((value >= 1024 || value <= -1024) && unit + 1 < kUnits.size()) {
    value /= 1024;
    ++unit;
  }
  std::array<char, 32> text{};
  const bool whole = unit == 0 || value >= 10 || value <= -10;
  std::snprintf(text.data(), text.size(), whole ? "%.0f %s" : "%.1f %s", value, kUnits[unit]);
  return text.data();
}

}  // namespace srformer
