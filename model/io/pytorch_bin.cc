#include "model/io/pytorch_bin.h"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <limits>
#include <string_view>
#include <vector>

#include "model/io/lfs_pointer.h"
#include "model/io/load_error.h"

namespace srformer {

std::string pytorch_bin_conversion_hint(const std::filesystem::path& bin) {
  const std::string out = (bin.parent_path() / "model.safetensors").string();
  return "convert it to safetensors once, with Python (torch + safetensors installed):\n"
         "  python -c \"import torch; from safetensors.torch import save_file; "
         "sd = torch.load('" +
         bin.string() +
         "', map_location='cpu'); "
         "save_file({k: v.detach().clone().contiguous() for k, v in sd.items()}, '" +
         out +
         "', metadata={'format': 'pt'})\"\n"
         "or with our tool: srformer convert " +
         bin.parent_path().string();
}

std::string view_outside_storage(const torch::Tensor& t) {
  if (t.numel() == 0) return "";
  if (t.storage_offset() < 0) return "starts at a negative offset";
  uint64_t last = static_cast<uint64_t>(t.storage_offset());
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.stride(d) < 0) return "has a negative stride";
    const auto reach = static_cast<unsigned __int128>(t.size(d) - 1) * static_cast<uint64_t>(t.stride(d));
    if (reach > std::numeric_limits<uint64_t>::max() / 4 || last > std::numeric_limits<uint64_t>::max() / 4) {
      return "reaches past any storage";
    }
    last += static_cast<uint64_t>(reach);
  }
  const auto needed = static_cast<unsigned __int128>(last + 1) * static_cast<uint64_t>(t.element_size());
  const auto held = static_cast<uint64_t>(t.storage().nbytes());
  if (needed > held) {
    return "reads " + std::to_string(static_cast<uint64_t>(needed)) + " bytes of a storage of " + std::to_string(held);
  }
  return "";
}

std::map<std::string, torch::Tensor> load_pytorch_bin(const std::filesystem::path& bin) {
  const auto fail = [&](const std::string& what) -> LoadError {
    return LoadError(bin.string() + ": " + what + "; " + pytorch_bin_conversion_hint(bin));
  };
  std::ifstream in(bin, std::ios::binary);
  if (!in) throw fail("cannot open");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw fail("read error");
  // torch.save has written zip archives since PyTorch 1.6; LibTorch cannot read the older raw pickles.
  if (bytes.size() < 4 || bytes[0] != 'P' || bytes[1] != 'K' || bytes[2] != '\x03' || bytes[3] != '\x04') {
    if (auto pointer = lfs_pointer_message(bin, std::string_view(bytes.data(), std::min<size_t>(bytes.size(), 1024)))) {
      throw LoadError(*pointer);
    }
    throw fail("not a zip-format torch.save file (legacy pre-1.6 format or not a PyTorch checkpoint)");
  }

  torch::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const c10::Error& e) {
    throw fail(std::string("LibTorch cannot unpickle it (") + e.what_without_backtrace() + ")");
  } catch (const std::exception& e) {
    throw fail(std::string("LibTorch cannot unpickle it (") + e.what() + ")");
  }
  if (!value.isGenericDict()) throw fail("expected a {name: tensor} dict, got " + value.tagKind());
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor()) {
      throw fail("expected a {name: tensor} dict, found an entry of kind " + item.key().tagKind() + " -> " +
                 item.value().tagKind());
    }
    const auto& name = item.key().toStringRef();
    const auto tensor = item.value().toTensor();
    if (const auto problem = view_outside_storage(tensor); !problem.empty()) {
      throw fail("tensor '" + name + "' " + problem + " (a damaged file)");
    }
    tensors.emplace(name, tensor);
  }
  return tensors;
}

}  // namespace srformer
