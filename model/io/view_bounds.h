#pragma once
// Whether a strided view stays inside the bytes of its storage, checked without overflow.
#include <cstdint>
#include <string>
#include <vector>

namespace srformer {

// What is wrong where the view of `element_size`-byte elements starting `offset` elements in, with these
// sizes and strides (in elements), reaches outside `held` bytes, or has a negative offset, stride or size;
// empty where it stays inside or reads nothing. Sizes and strides must have the same length.
std::string view_outside_bytes(int64_t offset, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                               uint64_t element_size, uint64_t held);

}  // namespace srformer
