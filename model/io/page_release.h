#pragma once
// Handing memory that will not be read again back to the kernel without giving it up: a loaded
// checkpoint's row-major weights, once packed (kernels/fp32_packed_linear.h), are read only if the
// packed path is switched off at run time. Their pages were faulted in by packing and would otherwise
// stay resident (counted in RSS and in a container's working set) until memory pressure reclaimed them.
#include <cstddef>

namespace srformer {

// MADV_PAGEOUT (Linux 5.4+) on the whole pages inside [data, data + bytes): the kernel reclaims them
// now. Data-safe: a page of a file mapping that was never written comes back from the file on its next
// read; a written (private) or anonymous page goes to swap, or stays where there is none. Returns
// whether the kernel took the advice (false on older kernels or other systems, where nothing changes).
bool release_pages(const void* data, size_t bytes);

}  // namespace srformer
