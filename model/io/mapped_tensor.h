#pragma once
// Tensor data read in place from a memory-mapped checkpoint (safetensors, pytorch_model.bin).
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "model/io/mapped_file.h"

namespace srformer {

// The `bytes` bytes at `offset` in `mapping` as a tensor of `shape` and `dtype` (`bytes` is the shape's
// element count times the dtype's size, checked by the caller): a view of the mapping, which the tensor
// keeps alive, or a copy where the bytes are not aligned for the dtype (a writer that does not align its
// data must not hand kernels a misaligned pointer).
torch::Tensor mapped_tensor(const std::shared_ptr<const MappedFile>& mapping, uint64_t offset, uint64_t bytes,
                            const std::vector<int64_t>& shape, torch::ScalarType dtype);

}  // namespace srformer
