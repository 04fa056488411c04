#include "model/kernels/fp32_attention.h"

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/kernels/attention_groups.h"
#include "model/kernels/avx2.h"
#include "model/kernels/outer_product.h"

namespace srformer::kernels {

#ifdef SRFORMER_HAVE_AVX2_KERNELS

bool fp32_attention_available() { return avx2_fma_available(); }

namespace {

using Product = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, float*, int64_t);

// One group's products: kᵀ [d, T] (a block reads 64 keys' values of one dimension as vectors), held
// (prepared keys) or borrowed (a per-thread buffer), and v read in place.
struct Products {
  std::vector<float> held;
  const float* keys_t = nullptr;
  const float* v = nullptr;
  int64_t v_stride = 0, t = 0, d = 0;
  Product product = nullptr;
  const float* keys() const { return held.empty() ? keys_t : held.data(); }
  void scores(const float* q_rows, int64_t q_stride, int64_t n, float* s) const {
    product(q_rows, q_stride, n, keys(), t, d, t, s, t);
  }
  void values(const float* p, int64_t n, float* out_rows, int64_t out_stride) const {
    product(p, t, n, v, v_stride, t, d, out_rows, out_stride);
  }
};

Product product_kernel() { return use_avx512() ? Product{outer::product} : Product{outer::avx2_product}; }  // same bits

void check_available() {
  if (!avx2_fma_available()) throw std::logic_error("fp32_attention needs AVX2 and FMA (fp32_attention_available())");
}

// kᵀ of one group into keys_t [d, T], by tiles of 16 keys: each write is a whole cache line of one
// dimension's row, where one key at a time touched d lines T apart per key (at 8k keys, in pieces that
// each transposed again, 17% of the encode's profile).
void transpose_keys(const float* k_g, int64_t row, int64_t t, int64_t d, float* keys_t) {
  constexpr int64_t kTile = 16;
  for (int64_t j0 = 0; j0 < t; j0 += kTile) {
    const int64_t n = std::min(kTile, t - j0);
    for (int64_t c = 0; c < d; ++c) {
      float* out = keys_t + c * t + j0;
      for (int64_t j = 0; j < n; ++j) out[j] = k_g[(j0 + j) * row + c];
    }
  }
}

}  // namespace

void fp32_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads) {
  check_available();
  const int64_t t = shape.keys, d = shape.head_dim;
  const Product product = product_kernel();
  attention_groups(q, q_layout, bias, out, out_layout, shape, threads, [&](int64_t b, int64_t h) {
    thread_local std::vector<float> keys_t;
    keys_t.resize(static_cast<size_t>(d * t));
    transpose_keys(k + b * k_layout.batch + h * k_layout.head, k_layout.row, t, d, keys_t.data());
    return Products{{}, keys_t.data(), v + b * v_layout.batch + h * v_layout.head, v_layout.row, t, d, product};
  });
}

std::unique_ptr<const AttentionKeys> fp32_attention_keys(const float* k, HeadLayout k_layout, const float* v,
                                                         HeadLayout v_layout, const AttentionShape& shape,
                                                         int threads) {
  check_available();
  const int64_t t = shape.keys, d = shape.head_dim;
  const Product product = product_kernel();
  return std::make_unique<GroupProducts<Products>>(shape, threads, [&](int64_t b, int64_t h) {
    std::vector<float> keys_t(static_cast<size_t>(d * t));
    transpose_keys(k + b * k_layout.batch + h * k_layout.head, k_layout.row, t, d, keys_t.data());
    return Products{
        std::move(keys_t), nullptr, v + b * v_layout.batch + h * v_layout.head, v_layout.row, t, d, product};
  });
}

void fp32_attention(const float* q, HeadLayout q_layout, const AttentionKeys& keys, const AttentionBias& bias,
                    float* out, HeadLayout out_layout, const AttentionShape& shape, int threads) {
  check_available();
  attention_groups<Products>(q, q_layout, keys, "fp32_attention", bias, out, out_layout, shape, threads);
}

#else

bool fp32_attention_available() { return false; }

void fp32_attention(const float*, HeadLayout, const float*, HeadLayout, const float*, HeadLayout, const AttentionBias&,
                    float*, HeadLayout, const AttentionShape&, int) {
  throw std::logic_error("fp32_attention needs AVX2 and FMA, which this build or platform lacks");
}

std::unique_ptr<const AttentionKeys> fp32_attention_keys(const float*, HeadLayout, const float*, HeadLayout,
                                                         const AttentionShape&, int) {
  throw std::logic_error("fp32_attention needs AVX2 and FMA, which this build or platform lacks");
}

void fp32_attention(const float*, HeadLayout, const AttentionKeys&, const AttentionBias&, float*, HeadLayout,
                    const AttentionShape&, int) {
  throw std::logic_error("fp32_attention needs AVX2 and FMA, which this build or platform lacks");
}

#endif

}  // namespace srformer::kernels
