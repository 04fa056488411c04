#include "model/kernels/parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace srformer::kernels {

void parallel_chunks(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int team = static_cast<int>(std::clamp<int64_t>(threads, 1, n));
  if (team == 1) {
    fn(0, n);
    return;
  }
  std::exception_ptr error;
  std::mutex mu;
#pragma omp parallel num_threads(team)
  {
#ifdef _OPENMP
    const int64_t t = omp_get_thread_num();
    const int64_t nt = omp_get_num_threads();
#else
    const int64_t t = 0;
    const int64_t nt = 1;
#endif
    const int64_t begin = n * t / nt;
    const int64_t end = n * (t + 1) / nt;
    try {
      if (begin < end) fn(begin, end);
    } catch (...) {
      const std::lock_guard lock(mu);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace srformer::kernels
