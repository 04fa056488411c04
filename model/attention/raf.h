#pragma once
// Recurrent Accumulate-and-Fire neuron (paper Appendix A.2; authors' training branch):
//   mem = leak * mem + x W^T;  y = mem / threshold - 1;  mem -= threshold * [y > 0];  R = relu(y)
// All in fp32. W is SNN_kv.weight [d,d] applied to the last dimension (nn.Linear, no bias).
#include <torch/types.h>

namespace srformer {

struct RafParams {
  torch::Tensor weight;     // [d, d] fp32
  torch::Tensor threshold;  // [1] fp32
  torch::Tensor leak;       // [1] fp32
};

struct RafOutput {
  torch::Tensor mem;    // new membrane, same shape as input
  torch::Tensor out;    // R = relu(y)
  torch::Tensor fired;  // [y > 0] as bool
};

// x, mem: [..., d, d] fp32.
RafOutput raf_step(const RafParams& p, const torch::Tensor& mem, const torch::Tensor& x);

// The same step from the linear's output (drive = x Wᵀ), for drives computed ahead of time.
RafOutput raf_fire(const RafParams& p, const torch::Tensor& mem, const torch::Tensor& drive);

}  // namespace srformer
