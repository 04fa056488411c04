#pragma once
// One row of attention scores into probabilities, in place: add the bias row, then the key mask,
// then softmax (max, Σ exp(s − max), scale by 1/Σ). A row whose keys are all masked (-inf) becomes
// zeros. Shared by the CPU attention kernels (amx_attention, fp32_attention); AVX2 + FMA only.
#include <cstdint>

namespace srformer::kernels {

// bias and key_mask may be null.
void attention_softmax_row(float* s, const float* bias, const float* key_mask, int64_t n);

}  // namespace srformer::kernels
