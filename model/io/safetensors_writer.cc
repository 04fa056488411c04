// save_safetensors: the writing half of model/io/safetensors.h.
#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "model/io/atomic_file.h"
#include "model/io/safetensors.h"
#include "model/io/safetensors_dtype.h"

namespace srformer {
namespace {

struct Prepared {
  std::string name;
  SafetensorsDtype dtype;
  torch::Tensor cpu;  // contiguous CPU copy (or the tensor itself when it already is one)
};

}  // namespace

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Prepared> prepared;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): invalid tensor name '" + name + "'");
    }
    if (!seen.insert(name).second) {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): duplicate tensor name '" + name + "'");
    }
    if (!tensor.defined() || tensor.layout() != torch::kStrided) {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): tensor '" + name +
                                  "' is undefined or not dense");
    }
    const auto dtype = safetensors_dtype(tensor.scalar_type());
    if (!dtype) {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): tensor '" + name + "' has dtype " +
                                  std::string(c10::toString(tensor.scalar_type())) +
                                  "; supported: " + supported_safetensors_dtypes());
    }
    prepared.push_back({name, *dtype, tensor.detach().to(torch::kCPU).contiguous()});
  }
  // Wider elements first: with the header padded to 8 bytes every tensor then starts aligned.
  std::sort(prepared.begin(), prepared.end(), [](const Prepared& a, const Prepared& b) {
    if (a.dtype.element_size != b.dtype.element_size) return a.dtype.element_size > b.dtype.element_size;
    return a.name < b.name;
  });

  nlohmann::json header = nlohmann::json::object();
  auto& meta = header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [key, value] : metadata) meta[key] = value;
  uint64_t offset = 0;
  for (const Prepared& p : prepared) {
    const uint64_t nbytes = p.cpu.numel() * p.dtype.element_size;
    header[p.name] = {
        {"dtype", p.dtype.code}, {"shape", p.cpu.sizes().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_size = text.size();  // little-endian on every host we build for (see safetensors.cc)

  AtomicFile out(path);
  out.write(&header_size, sizeof header_size);
  out.write(text.data(), text.size());
  for (const Prepared& p : prepared) {
    if (p.cpu.numel() > 0) out.write(p.cpu.data_ptr(), p.cpu.numel() * p.dtype.element_size);
  }
  out.commit();
}

}  // namespace srformer
