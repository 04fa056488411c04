#include "model/io/page_release.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace srformer {

bool release_pages(const void* data, size_t bytes) {
#if defined(__linux__) && defined(MADV_PAGEOUT)
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t first = (begin + page - 1) / page * page;  // pages wholly inside the range only:
  const uintptr_t last = (begin + bytes) / page * page;      // their neighbours may still be in use
  if (data == nullptr || last <= first) return false;
  return ::madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT) == 0;
#else
  (void)data;
  (void)bytes;
  return false;
#endif
}

}  // namespace srformer
