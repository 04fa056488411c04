#include "model/mapped_storage.h"

#include <torch/torch.h>

#include <algorithm>
#include <memory>

#ifdef __linux__
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace srformer {

#ifdef __linux__
namespace {

struct Mapping {
  void* addr = nullptr;  // null once mremap moved the pages to another Mapping
  size_t length = 0;
};

// The storage's deleter: the context is the Mapping.
void release_mapping(void* context) {
  const std::unique_ptr<Mapping> mapping(static_cast<Mapping*>(context));
  if (mapping->addr != nullptr) munmap(mapping->addr, mapping->length);
}

size_t page_rounded(int64_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const auto b = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  return (b + page - 1) / page * page;
}

// A storage over `mapping`'s pages, which it then owns.
c10::Storage storage_over(std::unique_ptr<Mapping> mapping) {
  const size_t length = mapping->length;
  // DataPtr takes a C-style context and deleter: release_mapping takes the Mapping back.
  c10::DataPtr data(mapping->addr, mapping.get(), &release_mapping, c10::Device(c10::kCPU));
  mapping.release();
  return c10::Storage(c10::Storage::use_byte_size_t(), length, std::move(data), nullptr, false);
}

Mapping* mapping_of(const torch::Tensor& t) {
  if (!t.defined() || !t.is_cpu() || !t.has_storage()) return nullptr;
  const auto& data = t.storage().data_ptr();
  return data.get_deleter() == &release_mapping ? static_cast<Mapping*>(data.get_context()) : nullptr;
}

}  // namespace

torch::Tensor mapped_empty(int64_t numel, const torch::TensorOptions& options) {
  const auto element = static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options.dtype())));
  const size_t length = page_rounded(numel * element);
  auto mapping = std::make_unique<Mapping>();
  void* addr = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (addr == MAP_FAILED) return torch::empty({numel}, options.device(c10::kCPU));
  *mapping = Mapping{addr, length};
  auto out = torch::empty({0}, options.device(c10::kCPU));
  out.set_(storage_over(std::move(mapping)), 0, {numel}, {1});
  return out;
}

bool resize_mapped_storage(torch::Tensor& t, int64_t bytes) {
  Mapping* old = mapping_of(t);
  if (old == nullptr || old->addr == nullptr || t.use_count() != 1 || t.storage().use_count() != 1) return false;
  int64_t end = t.storage_offset() + 1;  // one past t's last element
  for (int64_t i = 0; i < t.dim(); ++i) end += (t.size(i) - 1) * t.stride(i);
  if (t.numel() == 0) end = t.storage_offset();
  if (end * static_cast<int64_t>(t.element_size()) > bytes) return false;
  const size_t length = page_rounded(bytes);
  if (length == old->length) return true;
  auto mapping = std::make_unique<Mapping>();  // allocated first: nothing may fail once the pages moved
  const auto sizes = t.sizes().vec();
  const auto strides = t.strides().vec();
  void* addr = mremap(old->addr, old->length, length, MREMAP_MAYMOVE);
  if (addr == MAP_FAILED) return false;
  old->addr = nullptr;  // the old storage, released by set_ below, must not unmap the moved pages
  *mapping = Mapping{addr, length};
  t.set_(storage_over(std::move(mapping)), t.storage_offset(), sizes, strides);
  return true;
}

bool is_mapped_storage(const torch::Tensor& t) { return mapping_of(t) != nullptr; }

#else  // no mremap: plain LibTorch buffers, grown by copying (the callers' fallback)

torch::Tensor mapped_empty(int64_t numel, const torch::TensorOptions& options) {
  return torch::empty({numel}, options.device(c10::kCPU));
}
bool resize_mapped_storage(torch::Tensor&, int64_t) { return false; }
bool is_mapped_storage(const torch::Tensor&) { return false; }

#endif

}  // namespace srformer
