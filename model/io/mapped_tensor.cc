#include "model/io/mapped_tensor.h"

#include <torch/torch.h>

#include <cstring>

namespace srformer {

torch::Tensor mapped_tensor(const std::shared_ptr<const MappedFile>& mapping, uint64_t offset, uint64_t bytes,
                            const std::vector<int64_t>& shape, torch::ScalarType dtype) {
  const auto options = torch::TensorOptions().dtype(dtype);
  if (bytes == 0) return torch::empty(shape, options);
  std::byte* const data = mapping->data() + offset;
  if (reinterpret_cast<uintptr_t>(data) % c10::elementSize(dtype) != 0) {
    torch::Tensor copy = torch::empty(shape, options);
    std::memcpy(copy.data_ptr(), data, bytes);
    return copy;
  }
  auto keep_alive = mapping;
  return torch::from_blob(
      data, shape, [keep_alive](void*) {}, options);
}

}  // namespace srformer
