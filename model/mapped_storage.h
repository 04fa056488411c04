#pragma once
// CPU buffers whose storage is an anonymous memory mapping of their own, so that a buffer can grow
// and shrink without copying: mremap moves its pages to a larger range (page tables only) or gives
// the tail back. The decoder state's per-row and per-slot tensors grow this way as requests join a
// running batch: copying a BART-base batch's cross keys/values into a buffer twice the size cost
// 0.8-1.3 s at 12 and 30 rows on this VM, nearly all of it first touches of the new buffer's pages
// (~0.6-2 ms per MB here, against ~0.1 ms per MB to copy memory already touched). Transparent huge
// pages are not requested: with the kernel's usual `defrag=madvise` a fault in such a region may
// compact memory first, and joins measured slower with them (1.9-2.0 s against 1.4-1.5 s a run).
#include <torch/types.h>

#include <cstdint>

namespace srformer {

// A 1-D CPU tensor of `numel` uninitialized elements (zero pages until written) in a mapping of its
// own. Falls back to torch::empty off Linux or when the mapping fails.
torch::Tensor mapped_empty(int64_t numel, const torch::TensorOptions& options);

// Resizes t's storage to `bytes` (rounded up to whole pages) in place: growing keeps the contents
// (new pages read as zero), shrinking gives the pages past `bytes` back. t's sizes, strides and
// storage offset stay; its data pointer may change. Only for storage made by mapped_empty, held by t
// alone (owns_storage), and large enough for t's elements; returns false, changing nothing,
// otherwise or when the kernel refuses.
bool resize_mapped_storage(torch::Tensor& t, int64_t bytes);

// Whether t's storage is a mapping made by mapped_empty.
bool is_mapped_storage(const torch::Tensor& t);

}  // namespace srformer
