#include "model/io/view_bounds.h"

#include <algorithm>
#include <limits>

namespace srformer {

std::string view_outside_bytes(int64_t offset, const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                               uint64_t element_size, uint64_t held) {
  // Refused even where the view reads nothing: LibTorch's set_ refuses such views too.
  if (offset < 0) return "starts at a negative offset";
  if (std::any_of(strides.begin(), strides.end(), [](int64_t s) { return s < 0; })) return "has a negative stride";
  if (std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s < 0; })) return "has a negative size";
  if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) return "";
  uint64_t last = static_cast<uint64_t>(offset);
  for (size_t d = 0; d < sizes.size() && d < strides.size(); ++d) {
    const auto reach = static_cast<unsigned __int128>(sizes[d] - 1) * static_cast<uint64_t>(strides[d]);
    if (reach > std::numeric_limits<uint64_t>::max() / 4 || last > std::numeric_limits<uint64_t>::max() / 4) {
      return "reaches past any storage";
    }
    last += static_cast<uint64_t>(reach);
  }
  const auto needed = static_cast<unsigned __int128>(last + 1) * element_size;
  if (needed > held) {
    if (needed > std::numeric_limits<uint64_t>::max()) return "reaches past any storage";
    return "reads " + std::to_string(static_cast<uint64_t>(needed)) + " bytes of a storage of " + std::to_string(held);
  }
  return "";
}

}  // namespace srformer
