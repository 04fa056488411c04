#include "model/io/safetensors_dtype.h"

#include <array>

namespace srformer {
namespace {

constexpr std::array<SafetensorsDtype, 10> kDtypes{{
    {"F64", torch::kFloat64, 8},
    {"F32", torch::kFloat32, 4},
    {"F16", torch::kFloat16, 2},
    {"BF16", torch::kBFloat16, 2},
    {"I64", torch::kInt64, 8},
    {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},
    {"I8", torch::kInt8, 1},
    {"U8", torch::kUInt8, 1},
    {"BOOL", torch::kBool, 1},
}};

}  // namespace

std::optional<SafetensorsDtype> safetensors_dtype(const std::string& code) {
  for (const auto& d : kDtypes) {
    if (code == d.code) return d;
  }
  return std::nullopt;
}

std::optional<SafetensorsDtype> safetensors_dtype(torch::ScalarType scalar_type) {
  for (const auto& d : kDtypes) {
    if (scalar_type == d.scalar_type) return d;
  }
  return std::nullopt;
}

std::string supported_safetensors_dtypes() {
  std::string out;
  for (const auto& d : kDtypes) {
    if (!out.empty()) out += ", ";
    out += d.code;
  }
  return out;
}

}  // namespace srformer
