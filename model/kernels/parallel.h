#pragma once
// Splits [0, n) into one contiguous chunk per OpenMP thread (LibTorch's intra-op pool) and runs
// fn(begin, end) on each. This file is built with -fopenmp; at::parallel_for is inline, and in a file
// built without it (every file outside model/kernels/) it silently runs on one thread. Inside fn,
// LibTorch ops and our kernels run on the calling thread (nested regions get one thread).
#include <cstdint>
#include <functional>

namespace srformer::kernels {

// At most `threads` chunks (fewer when n is smaller); rethrows the first exception a chunk threw,
// after every chunk has finished.
void parallel_chunks(int64_t n, int threads, const std::function<void(int64_t begin, int64_t end)>& fn);

}  // namespace srformer::kernels
