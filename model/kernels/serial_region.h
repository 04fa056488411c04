#pragma once
// RAII: LibTorch ops on the calling thread run single-threaded until the end of the scope.
// For many small ops in a row (per-request search over a logits row: argmax, log-sum-exp, copies),
// waking the other OpenMP threads for each op costs more than the op: a greedy step over a 32k
// vocabulary measured 360 µs with 2 threads and 190 µs with 1 (`srformer bench --only search`).
namespace srformer::kernels {

class SerialRegion {
 public:
  SerialRegion();
  ~SerialRegion();
  SerialRegion(const SerialRegion&) = delete;
  SerialRegion& operator=(const SerialRegion&) = delete;

 private:
  int saved_ = 0;  // the thread's OpenMP team size before the scope
};

}  // namespace srformer::kernels
