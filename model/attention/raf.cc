#include "model/attention/raf.h"

#include <torch/torch.h>

namespace srformer {

RafOutput raf_step(const RafParams& p, const torch::Tensor& mem, const torch::Tensor& x) {
  auto m = p.leak * mem + torch::matmul(x, p.weight.t());
  const auto y = m / p.threshold - 1.0;
  const auto fired = y.gt(0);
  m = m - p.threshold * fired.to(m.scalar_type());
  return {m, torch::relu(y), fired};
}

}  // namespace srformer
