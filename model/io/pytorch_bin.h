#pragma once
// Reader for PyTorch `torch.save` state dicts (pytorch_model.bin): our own zip reader and restricted
// unpickler, which refuse a damaged file with a LoadError where LibTorch's pickle_load could crash.
#include <torch/types.h>

#include <filesystem>
#include <map>
#include <string>

namespace srformer {

// How to turn a .bin checkpoint into safetensors; appended to every failure below.
std::string pytorch_bin_conversion_hint(const std::filesystem::path& bin);

// Reads a zip-format torch.save file holding a flat {name: tensor} dict. Tensors are CPU, in their stored
// dtype, viewing the file's memory mapping (tied weights share one storage). Throws LoadError (with the
// conversion hint) for anything else: legacy (pre-1.6) files, a damaged archive or pickle, other globals.
std::map<std::string, torch::Tensor> load_pytorch_bin(const std::filesystem::path& bin);

}  // namespace srformer
