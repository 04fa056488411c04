#pragma once
// A restricted unpickler for the data.pkl of a torch.save state dict. It knows the opcodes torch.save
// (pickle protocol 2) and LibTorch's pickle_save emit and a fixed list of globals (OrderedDict, the tensor
// and parameter rebuilders, the storage classes as dtype markers); it calls nothing, and anything else is
// refused with a LoadError naming the byte and what is wrong.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace srformer {

// The storage `key` of the archive: a 1-D tensor of `numel` elements of `dtype` owning (or keeping alive)
// its bytes. Called once per key. Throws LoadError where the record is missing or of another size.
using TorchStorageLoader =
    std::function<torch::Tensor(const std::string& key, torch::ScalarType dtype, uint64_t numel)>;

// The {name: tensor} dict pickled in `pickle`. Tensors view the storages `load_storage` returns (tied
// weights share one). Throws LoadError ("data.pkl byte N: ...") for anything but such a dict.
std::map<std::string, torch::Tensor> unpickle_state_dict(std::string_view pickle,
                                                         const TorchStorageLoader& load_storage);

}  // namespace srformer
