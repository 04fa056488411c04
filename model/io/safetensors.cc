#include "model/io/safetensors.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>
#include <tuple>

#include "model/io/json_depth.h"
#include "model/io/lfs_pointer.h"
#include "model/io/load_error.h"
#include "model/io/mapped_file.h"
#include "model/io/mapped_tensor.h"
#include "model/io/safetensors_dtype.h"

// The format stores little-endian numbers; we read them in place.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O supports little-endian hosts only");

namespace srformer {
namespace {

using nlohmann::json;

// Real headers are kilobytes to a few megabytes; anything larger is a corrupt or foreign file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

class HeaderParser {
 public:
  HeaderParser(const std::filesystem::path& path, uint64_t data_size) : path_(path), data_size_(data_size) {}

  [[noreturn]] void fail(const std::string& what) const { throw LoadError(path_.string() + ": " + what); }
  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    fail("tensor '" + name + "': " + what);
  }

  TensorInfo entry(const std::string& name, const json& value) const {
    if (!value.is_object()) fail(name, std::string("entry must be a JSON object, got ") + value.type_name());
    TensorInfo info;
    info.name = name;

    const json& dtype = field(name, value, "dtype");
    if (!dtype.is_string()) fail(name, "\"dtype\" must be a string");
    info.dtype = dtype.get<std::string>();
    const auto code = safetensors_dtype(info.dtype);
    if (!code) fail(name, "unknown dtype \"" + info.dtype + "\" (supported: " + supported_safetensors_dtypes() + ")");

    const json& shape = field(name, value, "shape");
    if (!shape.is_array()) fail(name, "\"shape\" must be an array of non-negative integers");
    uint64_t numel = 1;
    for (const json& dim : shape) {
      if (!dim.is_number_integer())
        fail(name, "\"shape\" must be an array of non-negative integers, got " + shape.dump());
      if (dim.is_number_unsigned() ? dim.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                                   : dim.get<int64_t>() < 0) {
        fail(name, "negative or oversized dimension in shape " + shape.dump());
      }
      info.shape.push_back(dim.get<int64_t>());
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(info.shape.back()), &numel)) {
        fail(name, "shape " + shape.dump() + " has more elements than fit in 64 bits");
      }
    }

    const json& offsets = field(name, value, "data_offsets");
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      fail(name, "\"data_offsets\" must be [begin, end] with non-negative integers, got " + offsets.dump());
    }
    info.begin = offsets[0].get<uint64_t>();
    info.end = offsets[1].get<uint64_t>();
    if (info.begin > info.end) fail(name, "data_offsets " + offsets.dump() + " has begin > end");
    if (info.end > data_size_) {
      fail(name, "data_offsets " + offsets.dump() + " end beyond the data section (" + std::to_string(data_size_) +
                     " bytes; truncated file?)");
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, code->element_size, &nbytes) || nbytes != info.end - info.begin) {
      fail(name, "data_offsets " + offsets.dump() + " span " + std::to_string(info.end - info.begin) +
                     " bytes but dtype " + info.dtype + " with shape " + shape_string(info.shape) + " needs " +
                     std::to_string(numel) + " x " + std::to_string(code->element_size) + " bytes");
    }
    return info;
  }

  // Non-empty tensors may not share bytes (as in Hugging Face's reader); gaps between them are tolerated.
  void check_overlaps(std::vector<TensorInfo> infos) const {
    std::sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
      return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
    });
    const TensorInfo* previous = nullptr;
    for (const TensorInfo& info : infos) {
      if (info.begin == info.end) continue;
      if (previous != nullptr && info.begin < previous->end) {
        fail("tensors '" + previous->name + "' [" + std::to_string(previous->begin) + ", " +
             std::to_string(previous->end) + ") and '" + info.name + "' [" + std::to_string(info.begin) + ", " +
             std::to_string(info.end) + ") overlap");
      }
      previous = &info;
    }
  }

 private:
  const json& field(const std::string& name, const json& entry, const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) fail(name, std::string("missing \"") + key + "\"");
    return *it;
  }

  const std::filesystem::path& path_;
  uint64_t data_size_;
};

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  auto mapping = std::make_shared<const MappedFile>(path);
  const uint64_t size = mapping->size();
  const auto fail = [&](const std::string& what) { throw LoadError(path.string() + ": " + what); };
  const std::string_view head(reinterpret_cast<const char*>(mapping->data()), std::min<uint64_t>(size, 1024));
  if (auto pointer = lfs_pointer_message(path, head)) throw LoadError(*pointer);

  if (size < 8) fail("file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  uint64_t header_size = 0;
  std::memcpy(&header_size, mapping->data(), sizeof header_size);
  if (header_size > kMaxHeaderBytes) {
    fail("header length " + std::to_string(header_size) + " is absurd (limit " + std::to_string(kMaxHeaderBytes) +
         " bytes); not a safetensors file?");
  }
  if (header_size > size - 8) {
    fail("header length " + std::to_string(header_size) + " exceeds the " + std::to_string(size - 8) +
         " bytes after the length prefix (truncated file?)");
  }
  file.data_offset_ = 8 + header_size;

  const auto* header_begin = reinterpret_cast<const char*>(mapping->data()) + 8;
  json header;
  try {
    check_json_depth<std::invalid_argument>(std::string_view(header_begin, header_size), "the header ");
    header = json::parse(header_begin, header_begin + header_size);
  } catch (const std::invalid_argument& e) {
    fail(e.what());
  } catch (const json::exception& e) {
    fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(std::string("header must be a JSON object, got ") + header.type_name());

  const HeaderParser parser(path, size - file.data_offset_);
  auto metadata = std::make_shared<json>(json::object());
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(std::string("\"__metadata__\" must be a JSON object, got ") + value.type_name());
      *metadata = value;
      file.has_metadata_ = true;
      continue;
    }
    file.tensors_.push_back(parser.entry(name, value));
  }
  parser.check_overlaps(file.tensors_);
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  file.metadata_ = std::move(metadata);
  file.mapping_ = std::move(mapping);
  return file;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  const auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                                   [](const TensorInfo& info, const std::string& key) { return info.name < key; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

torch::Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) {
    throw LoadError(path_.string() + ": no tensor named '" + name + "' (the file has " +
                    std::to_string(tensors_.size()) + " tensors)");
  }
  const auto dtype = safetensors_dtype(info->dtype);  // validated in open()
  return mapped_tensor(mapping_, data_offset_ + info->begin, info->end - info->begin, info->shape, dtype->scalar_type);
}

}  // namespace srformer
