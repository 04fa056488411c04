#include "model/io/pytorch_bin.h"

#include <torch/torch.h>

#include <memory>
#include <string_view>

#include "model/io/lfs_pointer.h"
#include "model/io/load_error.h"
#include "model/io/mapped_file.h"
#include "model/io/mapped_tensor.h"
#include "model/io/torch_unpickler.h"
#include "model/io/zip_archive.h"

namespace srformer {

// No pointer to `srformer convert`: it reads the file through this same code, so it cannot convert one
// refused here (the hint said "or with our tool: srformer convert DIR", a command that lacks its DST_DIR
// and would have failed alike).
std::string pytorch_bin_conversion_hint(const std::filesystem::path& bin) {
  const std::string out = (bin.parent_path() / "model.safetensors").string();
  return "convert it to safetensors once, with Python (torch + safetensors installed):\n"
         "  python -c \"import torch; from safetensors.torch import save_file; "
         "sd = torch.load('" +
         bin.string() +
         "', map_location='cpu'); "
         "save_file({k: v.detach().clone().contiguous() for k, v in sd.items()}, '" +
         out + "', metadata={'format': 'pt'})\"";
}

namespace {

// The directory all entries of a torch.save archive sit in: "archive/", or the file's stem for torch
// before 1.9 (LibTorch reads either).
std::string archive_prefix(const ZipArchive& zip) {
  if (zip.entries().empty()) throw LoadError("the zip archive is empty");
  const std::string& first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos || slash == 0) throw LoadError("zip entry '" + first + "' is not inside a directory");
  std::string prefix = first.substr(0, slash + 1);
  for (const ZipArchive::Entry& e : zip.entries()) {
    if (e.name.compare(0, prefix.size(), prefix) != 0) {
      throw LoadError("zip entries '" + first + "' and '" + e.name + "' are not in one top-level directory");
    }
  }
  return prefix;
}

// One storage record as a 1-D tensor of its dtype, read in place (mapped_tensor).
torch::Tensor storage_tensor(const std::shared_ptr<const MappedFile>& mapping, const ZipArchive& zip,
                             const std::string& prefix, const std::string& key, torch::ScalarType dtype,
                             uint64_t numel) {
  const std::string name = prefix + "data/" + key;
  const ZipArchive::Entry* entry = zip.find(name);
  if (entry == nullptr) throw LoadError("storage '" + key + "' has no record " + name);
  const auto element_size = static_cast<uint64_t>(c10::elementSize(dtype));
  if (numel > entry->size / element_size || numel * element_size != entry->size) {
    throw LoadError("record " + name + " holds " + std::to_string(entry->size) + " bytes, but the pickle declares " +
                    std::to_string(numel) + " elements of " + std::to_string(element_size) +
                    " bytes (the file is truncated or damaged)");
  }
  return mapped_tensor(mapping, entry->data_offset, entry->size, {static_cast<int64_t>(numel)}, dtype);
}

}  // namespace

std::map<std::string, torch::Tensor> load_pytorch_bin(const std::filesystem::path& bin) {
  const auto fail = [&](const std::string& what) -> LoadError {
    return LoadError(bin.string() + ": " + what + "; " + pytorch_bin_conversion_hint(bin));
  };
  std::shared_ptr<const MappedFile> mapping;
  try {
    mapping = std::make_shared<const MappedFile>(bin);
  } catch (const LoadError& e) {
    throw LoadError(std::string(e.what()) + "; " + pytorch_bin_conversion_hint(bin));
  }
  const std::string_view bytes(reinterpret_cast<const char*>(mapping->data()), mapping->size());
  // torch.save has written zip archives since PyTorch 1.6; the older raw pickles are not read.
  if (bytes.substr(0, 4) != std::string_view("PK\x03\x04", 4)) {
    if (auto pointer = lfs_pointer_message(bin, bytes.substr(0, 1024))) throw LoadError(*pointer);
    throw fail("not a zip-format torch.save file (legacy pre-1.6 format or not a PyTorch checkpoint)");
  }
  try {
    const ZipArchive zip(mapping->data(), mapping->size());
    const std::string prefix = archive_prefix(zip);
    if (const ZipArchive::Entry* order = zip.find(prefix + "byteorder")) {
      if (zip.bytes(*order) != "little") {
        throw LoadError("its byteorder record says '" + std::string(zip.bytes(*order).substr(0, 16)) +
                        "': only little-endian checkpoints are read");
      }
    }
    const ZipArchive::Entry* pickle = zip.find(prefix + "data.pkl");
    if (pickle == nullptr) throw LoadError("the zip archive has no " + prefix + "data.pkl");
    zip.check_crc(*pickle);
    return unpickle_state_dict(zip.bytes(*pickle),
                               [&](const std::string& key, torch::ScalarType dtype, uint64_t numel) {
                                 return storage_tensor(mapping, zip, prefix, key, dtype, numel);
                               });
  } catch (const LoadError& e) {
    throw fail(e.what());
  } catch (const c10::Error& e) {
    throw fail(std::string("LibTorch refuses it (") + e.what_without_backtrace() + ")");
  }
}

}  // namespace srformer
