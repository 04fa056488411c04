#pragma once
// Best-effort reader for PyTorch `torch.save` state dicts (pytorch_model.bin), via LibTorch's unpickler.
#include <torch/types.h>

#include <filesystem>
#include <map>
#include <string>

namespace srformer {

// How to turn a .bin checkpoint into safetensors; appended to every failure below.
std::string pytorch_bin_conversion_hint(const std::filesystem::path& bin);

// Reads a zip-format torch.save file holding a flat {name: tensor} dict. Tensors are CPU, in their stored
// dtype. Throws LoadError (with the conversion hint) for anything LibTorch cannot read cleanly, such as
// legacy (pre-1.6) files or Python OrderedDicts on LibTorch 1.x.
std::map<std::string, torch::Tensor> load_pytorch_bin(const std::filesystem::path& bin);

// What is wrong where a tensor's view (offset, sizes, strides) reaches outside its storage's bytes, as a
// damaged file's can (LibTorch's unpickler does not check); empty where it stays inside. A storage record
// cut short is not seen here: the storage then claims the bytes the pickle declares.
std::string view_outside_storage(const torch::Tensor& t);

}  // namespace srformer
