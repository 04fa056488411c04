#pragma once
// The RAF neuron's element-wise half at a segment switch, in place over a row's membrane:
//   mem = leak * mem + drive;  y = mem / threshold - 1;  mem -= threshold * [y > 0];  out = relu(y)
// where drive = P Wᵀ was computed ahead (the precomputed switch table). LibTorch spends ~15 small
// ops of [heads, d, d] on this; one pass over the block costs a few microseconds.
// Plain C++ (no LibTorch). The operations and their order are those of raf_fire() in
// model/attention/raf.cc, so the results match LibTorch's.
#include <cstdint>

namespace srformer::kernels {

struct RafBlock {
  float* mem;          // membrane block, updated in place
  float* out;          // R, overwritten
  const float* drive;  // what the switch adds to the membrane
};

// Updates each of n blocks of `size` floats; fired[j] = elements of block j that fired.
void raf_accumulate_fire(const RafBlock* blocks, int64_t n, int64_t size, float leak, float threshold, int64_t* fired,
                         int threads);

}  // namespace srformer::kernels
