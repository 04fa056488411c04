#include "model/kernels/bf16_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "model/kernels/attention_groups.h"
#include "model/kernels/avx2.h"
#include "model/kernels/bf16_linear.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

namespace {

// q kᵀ takes the keys as the "weight" of a projection with T outputs, p v takes vᵀ ([d, T], read in
// place with strides) as the weight of a projection with d outputs.
struct Products {
  Bf16PackedMatrix keys, values_t;
  int64_t t;
  void scores(const float* q_rows, int64_t q_stride, int64_t n, float* s) const {
    keys.multiply(q_rows, n, s, 1, q_stride, t);
  }
  void values(const float* p, int64_t n, float* out_rows, int64_t out_stride) const {
    values_t.multiply(p, n, out_rows, 1, t, out_stride);
  }
};

void check_available() {
  if (!cpu_bf16_available()) {
    throw std::logic_error("bf16_attention needs AMX or AVX512-BF16 (cpu_bf16_available())");
  }
}

// A group's products from k and v as they lie.
auto products_of(const float* k, HeadLayout k_layout, const float* v, HeadLayout v_layout,
                 const AttentionShape& shape) {
  return [=](int64_t b, int64_t h) {
    const int64_t t = shape.keys, d = shape.head_dim;
    return Products{Bf16PackedMatrix(k + b * k_layout.batch + h * k_layout.head, t, d, nullptr, k_layout.row, 1),
                    Bf16PackedMatrix(v + b * v_layout.batch + h * v_layout.head, d, t, nullptr, 1, v_layout.row), t};
  };
}

}  // namespace

void bf16_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads) {
  check_available();
  attention_groups(q, q_layout, bias, out, out_layout, shape, threads, products_of(k, k_layout, v, v_layout, shape));
}

std::unique_ptr<const AttentionKeys> bf16_attention_keys(const float* k, HeadLayout k_layout, const float* v,
                                                         HeadLayout v_layout, const AttentionShape& shape,
                                                         int threads) {
  check_available();
  return std::make_unique<GroupProducts<Products>>(shape, threads, products_of(k, k_layout, v, v_layout, shape));
}

void bf16_attention(const float* q, HeadLayout q_layout, const AttentionKeys& keys, const AttentionBias& bias,
                    float* out, HeadLayout out_layout, const AttentionShape& shape, int threads) {
  check_available();
  attention_groups<Products>(q, q_layout, keys, "bf16_attention", bias, out, out_layout, shape, threads);
}

#else

void bf16_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                    float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("bf16_attention needs AMX or AVX512-BF16, which this build or platform lacks");
}

std::unique_ptr<const AttentionKeys> bf16_attention_keys(const float*, HeadLayout, const float*, HeadLayout,
                                                         const AttentionShape&, int) {
  throw std::logic_error("bf16_attention needs AMX or AVX512-BF16, which this build or platform lacks");
}

void bf16_attention(const float*, HeadLayout, const AttentionKeys&, const AttentionBias&, float*, HeadLayout,
                    const AttentionShape&, int) {
  throw std::logic_error("bf16_attention needs AMX or AVX512-BF16, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
