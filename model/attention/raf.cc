#include "model/attention/raf.h"

#include <torch/torch.h>

namespace srformer {

RafOutput raf_step(const RafParams& p, const torch::Tensor& mem, const torch::Tensor& x) {
  return raf_fire(p, mem, torch::matmul(x, p.weight.t()));
}

RafOutput raf_fire(const RafParams& p, const torch::Tensor& mem, const torch::Tensor& drive) {
  // The order of operations is also that of kernels::raf_accumulate_fire (same results).
  auto m = p.leak * mem + drive;
  const auto y = m / p.threshold - 1.0;
  const auto fired = y.gt(0);
  m = m - p.threshold * fired.to(m.scalar_type());
  return {m, torch::relu(y), fired};
}

}  // namespace srformer
