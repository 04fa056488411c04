#pragma once
// Reading and writing the safetensors format (8-byte little-endian header length, JSON header, raw data).
// Reading maps the file and hands out zero-copy tensor views; every header field is checked first.
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace srformer {

class MappedFile;

struct TensorInfo {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section (after the header)
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the header and every entry. Throws LoadError naming the file and the fault.
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const TensorInfo* find(const std::string& name) const;               // nullptr if absent
  // CPU tensor in its stored dtype viewing the mapping (which it keeps alive). Writes to it stay private
  // to this process (copy-on-write). Throws LoadError if absent.
  torch::Tensor tensor(const std::string& name) const;
  const nlohmann::json& metadata() const { return *metadata_; }  // "__metadata__" ({} if none)
  bool has_metadata() const { return has_metadata_; }            // whether the header holds "__metadata__"
  const std::filesystem::path& path() const { return path_; }

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  std::shared_ptr<const MappedFile> mapping_;
  uint64_t data_offset_ = 0;  // where the data section starts in the file
  std::vector<TensorInfo> tensors_;
  std::shared_ptr<const nlohmann::json> metadata_;
  bool has_metadata_ = false;
};

// Writes `tensors` (any device; F32/F16/BF16/F64/I64/I32/I16/I8/U8/BOOL) in the standard layout: header
// padded with spaces to a multiple of 8, "__metadata__" = {"format": "pt"} plus `metadata`, data ordered so
// every tensor is aligned to its element size. Written to a temporary file, then renamed over `path`.
// Throws std::invalid_argument for bad names or dtypes, std::runtime_error for I/O failures.
void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace srformer
