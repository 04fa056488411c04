#pragma once
// Integers read from flags, config values and file metadata: the whole text must be the number
// (std::stoll alone takes "12x" as 12 and std::stoull takes "-1" as 2^64 - 1), else nullopt.
#include <cctype>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace srformer {

inline std::optional<int64_t> whole_int64(const std::string& text) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

// Digits only: the whole uint64 range, no sign.
inline std::optional<uint64_t> whole_uint64(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return std::nullopt;
  size_t used = 0;
  uint64_t value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

}  // namespace srformer
