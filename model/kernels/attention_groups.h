#pragma once
// What the CPU attention kernels (bf16_attention, fp32_attention) share: the loop over (row, head)
// groups and blocks of queries, and one row of scores turned into probabilities. Each kernel brings
// its own two products. One group at a time per thread, so the [Tq, T] scores of a block live in a
// per-thread buffer instead of a [B, H, Tq, T] tensor; a group's result depends only on its operands.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/kernels/bf16_attention.h"  // AttentionShape, AttentionBias, HeadLayout

namespace srformer::kernels {

// One row of scores into probabilities, in place: add the bias row, then the key mask (either may be
// null), then softmax (max, Σ exp(s − max), scale by 1/Σ). A row whose keys are all masked (-inf)
// becomes zeros. AVX2 + FMA only.
void attention_softmax_row(float* s, const float* bias, const float* key_mask, int64_t n);

// Queries per block: bounds the per-thread scores buffer (8 MiB at 16k keys) whatever the length.
constexpr int64_t kAttentionQueriesPerBlock = 128;

// softmax(q kᵀ + bias) v for every group, split over `threads` OpenMP threads. make_products(b, h)
// returns the group's products: scores(q_rows, q_row_stride, n, scores [n, T]) and
// values(probabilities [n, T], n, out_rows, out_row_stride).
template <typename MakeProducts>
void attention_groups(const float* q, HeadLayout q_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                      const AttentionShape& shape, int threads, const MakeProducts& make_products) {
  const int64_t tq = shape.queries, t = shape.keys;
  const int64_t groups = shape.batch * shape.heads;
  if (groups <= 0 || tq <= 0 || t <= 0 || shape.head_dim <= 0) return;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t b = g / shape.heads, h = g % shape.heads;
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(std::min(tq, kAttentionQueriesPerBlock) * t));
    const auto& products = make_products(b, h);  // a temporary, or prepared keys' own
    const float* q_g = q + b * q_layout.batch + h * q_layout.head;
    float* out_g = out + b * out_layout.batch + h * out_layout.head;
    const float* bias_g = bias.data != nullptr ? bias.data + b * bias.b_stride + h * bias.h_stride : nullptr;
    const float* mask_b = bias.key_mask != nullptr ? bias.key_mask + b * bias.key_mask_b_stride : nullptr;
    for (int64_t i0 = 0; i0 < tq; i0 += kAttentionQueriesPerBlock) {
      const int64_t n = std::min(kAttentionQueriesPerBlock, tq - i0);
      products.scores(q_g + i0 * q_layout.row, q_layout.row, n, scores.data());
      for (int64_t i = 0; i < n; ++i) {
        attention_softmax_row(scores.data() + i * t, bias_g != nullptr ? bias_g + (i0 + i) * bias.q_stride : nullptr,
                              mask_b, t);
      }
      products.values(scores.data(), n, out_g + i0 * out_layout.row, out_layout.row);
    }
  }
}

// Every group's products made once (make_products(b, h), split over `threads`), held for several calls
// of attention_groups over blocks of queries: the kernels' AttentionKeys.
template <typename Products>
class GroupProducts final : public AttentionKeys {
 public:
  template <typename MakeProducts>
  GroupProducts(const AttentionShape& shape, int threads, const MakeProducts& make_products) : AttentionKeys(shape) {
    const int64_t groups = shape.batch * shape.heads;
    std::vector<std::unique_ptr<Products>> made(static_cast<size_t>(groups));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1 && groups > 1)
    for (int64_t g = 0; g < groups; ++g) {
      made[static_cast<size_t>(g)] = std::make_unique<Products>(make_products(g / shape.heads, g % shape.heads));
    }
    groups_ = std::move(made);
  }
  const Products& at(int64_t b, int64_t h) const { return *groups_[static_cast<size_t>(b * shape().heads + h)]; }

 private:
  std::vector<std::unique_ptr<Products>> groups_;
};

// attention_groups over the products a kernel prepared in `keys` (its GroupProducts<Products>); throws
// std::invalid_argument for keys of another shape or another kernel.
template <typename Products>
void attention_groups(const float* q, HeadLayout q_layout, const AttentionKeys& keys, const char* kernel,
                      const AttentionBias& bias, float* out, HeadLayout out_layout, const AttentionShape& shape,
                      int threads) {
  keys.check(shape, kernel);
  const auto* groups = dynamic_cast<const GroupProducts<Products>*>(&keys);
  if (groups == nullptr) throw std::invalid_argument(std::string(kernel) + ": keys prepared by another kernel");
  attention_groups(q, q_layout, bias, out, out_layout, shape, threads,
                   [groups](int64_t b, int64_t h) -> const Products& { return groups->at(b, h); });
}

}  // namespace srformer::kernels
