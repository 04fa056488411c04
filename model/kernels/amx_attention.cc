#include "model/kernels/amx_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "model/kernels/amx_linear.h"
#include "model/kernels/avx2.h"
#include "model/kernels/softmax_row.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

// Queries per pass: bounds the per-thread scores buffer (8 MiB at 16k keys) whatever the input length.
constexpr int64_t kQueriesPerPass = 128;

}  // namespace

void amx_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                   HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                   const AttentionShape& shape, int threads) {
  if (!amx_available()) throw std::logic_error("amx_attention needs AMX (amx_available())");
  const int64_t tq = shape.queries, t = shape.keys, d = shape.head_dim;
  const int64_t groups = shape.batch * shape.heads;
  if (groups <= 0 || tq <= 0 || t <= 0 || d <= 0) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g / shape.heads, h = g % shape.heads;
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(std::min(tq, kQueriesPerPass) * t));
    // q kᵀ takes the keys as the "weight" of a projection with T outputs, p v takes vᵀ ([d, T], read in
    // place with strides) as the weight of a projection with d outputs.
    const Bf16PackedMatrix keys(k + b * k_layout.batch + h * k_layout.head, t, d, nullptr, k_layout.row, 1);
    const Bf16PackedMatrix values_t(v + b * v_layout.batch + h * v_layout.head, d, t, nullptr, 1, v_layout.row);
    const float* q_g = q + b * q_layout.batch + h * q_layout.head;
    float* out_g = out + b * out_layout.batch + h * out_layout.head;
    const float* bias_g = bias.data != nullptr ? bias.data + b * bias.b_stride + h * bias.h_stride : nullptr;
    const float* mask_b = bias.key_mask != nullptr ? bias.key_mask + b * bias.key_mask_b_stride : nullptr;
    for (int64_t i0 = 0; i0 < tq; i0 += kQueriesPerPass) {
      const int64_t n = std::min(kQueriesPerPass, tq - i0);
      keys.multiply(q_g + i0 * q_layout.row, n, scores.data(), 1, q_layout.row, t);
      for (int64_t i = 0; i < n; ++i) {
        attention_softmax_row(scores.data() + i * t, bias_g != nullptr ? bias_g + (i0 + i) * bias.q_stride : nullptr,
                              mask_b, t);
      }
      values_t.multiply(scores.data(), n, out_g + i0 * out_layout.row, 1, t, out_layout.row);
    }
  }
}

#else

void amx_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                   float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("amx_attention needs AMX, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
