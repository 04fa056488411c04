#include "model/kernels/fp32_attention.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "model/kernels/attention_groups.h"
#include "model/kernels/avx2.h"
#include "model/kernels/outer_product.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

bool fp32_attention_available() { return avx2_fma_available(); }

void fp32_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads) {
  if (!avx2_fma_available()) throw std::logic_error("fp32_attention needs AVX2 and FMA (fp32_attention_available())");
  const int64_t t = shape.keys, d = shape.head_dim;
  using Product = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t);
  const Product product = use_avx512() ? Product{outer::product} : Product{outer::avx2_product};  // same bits
  struct Products {
    std::vector<float>* keys_t;  // kᵀ [d, T]: a block reads 64 keys' values of one dimension as vectors
    const float* v;
    int64_t v_stride, t, d;
    Product product;
    void scores(const float* q_rows, int64_t q_stride, int64_t n, float* s) const {
      product(q_rows, q_stride, n, keys_t->data(), t, d, t, s, t);
    }
    void values(const float* p, int64_t n, float* out_rows, int64_t out_stride) const {
      product(p, t, n, v, v_stride, t, d, out_rows, out_stride);
    }
  };
  attention_groups(q, q_layout, bias, out, out_layout, shape, threads, [&](int64_t b, int64_t h) {
    thread_local std::vector<float> keys_t;
    keys_t.resize(static_cast<size_t>(d * t));
    const float* k_g = k + b * k_layout.batch + h * k_layout.head;
    for (int64_t j = 0; j < t; ++j) {
      for (int64_t c = 0; c < d; ++c) keys_t[static_cast<size_t>(c * t + j)] = k_g[j * k_layout.row + c];
    }
    return Products{&keys_t, v + b * v_layout.batch + h * v_layout.head, v_layout.row, t, d, product};
  });
}

#else

bool fp32_attention_available() { return false; }

void fp32_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                    float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("fp32_attention needs AVX2 and FMA, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
