#pragma once
// Checks shared by the tests of the CPU attention kernels (attend_bf16, attend_fp32_kernel) against
// LibTorch's attend(): masks, position bias, strided operands, independence of rows and threads.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <tuple>

#include "model/attention/self_attention.h"
#include "model/kernels/bf16_attention.h"

namespace srformer::testing {

using AttendFn = std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                             const torch::Tensor&, const torch::Tensor&)>;

// `kernel` against attend() over several shapes: within `tolerance`; masked keys contribute nothing;
// results independent of the thread count and of the other rows; operands read in the projections'
// [B, T, H*d] layout give the same result; the key mask passed apart from the bias too.
inline void expect_attention_kernel_matches_attend(const AttendFn& kernel, double tolerance) {
  torch::manual_seed(9);
  for (const auto& [tq, t, d] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 8}, {5, 20, 16}, {33, 70, 64}, {17, 9, 40}, {300, 150, 32}}) {
    const int64_t B = 2, H = 3;
    const auto q = torch::randn({B, H, tq, d}) * 0.5;
    const auto k = torch::randn({B, H, t, d}) * 0.5;
    const auto v = torch::randn({B, H, t, d});
    // A key mask per row (row 1 loses its last keys) plus a per-head position bias, as T5's encoder has.
    auto allowed = torch::ones({B, 1, 1, t}, torch::kBool);
    if (t > 3) allowed[1].narrow(-1, t - 3, 3).fill_(false);
    const auto position = torch::randn({1, H, tq, t});
    const auto bias = additive_mask(allowed, torch::kFloat32) + position;
    const auto fast = kernel(q, k, v, bias, {});
    const auto exact = attend(q, k, v, bias);
    EXPECT_LT((fast - exact).abs().max().item<double>(), tolerance) << "tq=" << tq << " t=" << t << " d=" << d;
    // Masked keys contribute nothing, whatever their keys and values hold.
    if (t > 3) {
      auto k2 = k.clone(), v2 = v.clone();
      k2[1].narrow(1, t - 3, 3).fill_(1e3);
      v2[1].narrow(1, t - 3, 3).fill_(-1e3);
      EXPECT_TRUE(torch::equal(kernel(q, k2, v2, bias, {})[1], fast[1]));
    }
    // Rows and heads are independent of each other and of the thread count.
    at::set_num_threads(1);
    const auto serial = kernel(q, k, v, bias, {});
    at::set_num_threads(2);
    EXPECT_TRUE(torch::equal(serial, fast));
    EXPECT_TRUE(torch::equal(kernel(q.narrow(0, 1, 1), k.narrow(0, 1, 1), v.narrow(0, 1, 1), bias.narrow(0, 1, 1), {}),
                             fast.narrow(0, 1, 1)));
    // Operands read where a projection leaves them ([B, T, H*d] seen as [B, H, T, d]): the same result.
    const auto heads_inner = [](const torch::Tensor& x) { return x.transpose(1, 2).contiguous().transpose(1, 2); };
    const auto strided = kernel(heads_inner(q), heads_inner(k), heads_inner(v), bias, {});
    EXPECT_TRUE(tq == 1 || heads_inner(q).stride(2) == H * d) << "rows H*d apart";
    EXPECT_TRUE(torch::equal(strided, fast));
    // The mask passed apart from the position bias (T5's encoder: no [B,H,Tq,T] sum) changes nothing.
    const auto key_mask = additive_mask(allowed, torch::kFloat32);
    EXPECT_TRUE(torch::equal(kernel(q, k, v, position, key_mask), fast));
    EXPECT_TRUE(torch::equal(attend(q, k, v, position, key_mask), exact));
  }
}

// A query whose keys are all masked gets zeros (LibTorch's softmax would give NaN).
inline void expect_fully_masked_query_gets_zeros(const AttendFn& kernel) {
  const auto q = torch::randn({1, 1, 2, 8});
  const auto kv = torch::randn({1, 1, 4, 8});
  auto allowed = torch::ones({1, 1, 2, 4}, torch::kBool);
  allowed[0][0][1].fill_(false);
  const auto out = kernel(q, kv, kv, additive_mask(allowed, torch::kFloat32), {});
  EXPECT_TRUE(torch::equal(out[0][0][1], torch::zeros({8})));
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
}

// A kernel's keys prepared once (`prepare`: kernels::fp32_attention_keys or bf16_attention_keys), then
// attended by blocks of queries (`attend_prepared`), give every query the bits one call over all the
// queries gives (`attend_once`), with a key mask and a per-head position bias; the bias and outputs of a
// block are addressed by its first query. Keys prepared for another shape are refused.
using KernelFn = void (*)(const float*, kernels::HeadLayout, const float*, kernels::HeadLayout, const float*,
                          kernels::HeadLayout, const kernels::AttentionBias&, float*, kernels::HeadLayout,
                          const kernels::AttentionShape&, int);
using PrepareFn = std::unique_ptr<const kernels::AttentionKeys> (*)(const float*, kernels::HeadLayout, const float*,
                                                                    kernels::HeadLayout, const kernels::AttentionShape&,
                                                                    int);
using PreparedKernelFn = void (*)(const float*, kernels::HeadLayout, const kernels::AttentionKeys&,
                                  const kernels::AttentionBias&, float*, kernels::HeadLayout,
                                  const kernels::AttentionShape&, int);

inline void expect_prepared_keys_give_the_same_bits(KernelFn attend_once, PrepareFn prepare,
                                                    PreparedKernelFn attend_prepared) {
  torch::manual_seed(10);
  const int64_t B = 2, H = 3, Tq = 37, T = 29, d = 24;
  const auto q = torch::randn({B, H, Tq, d}) * 0.5;
  const auto k = torch::randn({B, H, T, d}) * 0.5;
  const auto v = torch::randn({B, H, T, d});
  auto allowed = torch::ones({B, 1, 1, T}, torch::kFloat32);
  allowed[1].narrow(-1, T - 5, 5).fill_(0);
  const auto key_mask = additive_mask(allowed.to(torch::kBool).view({B, T}), torch::kFloat32).contiguous();
  const auto position = torch::randn({1, H, Tq, T});
  kernels::AttentionBias bias;
  bias.data = position.data_ptr<float>();
  bias.h_stride = Tq * T;
  bias.q_stride = T;
  bias.key_mask = key_mask.data_ptr<float>();
  bias.key_mask_b_stride = T;
  const kernels::AttentionShape shape{B, H, Tq, T, d};
  const auto queries = kernels::HeadLayout::heads_outer(H, Tq, d), keys = kernels::HeadLayout::heads_outer(H, T, d);
  auto once = torch::zeros({B, H, Tq, d});
  attend_once(q.data_ptr<float>(), queries, k.data_ptr<float>(), keys, v.data_ptr<float>(), keys, bias,
              once.data_ptr<float>(), queries, shape, 2);
  const auto prepared = prepare(k.data_ptr<float>(), keys, v.data_ptr<float>(), keys, shape, 2);
  for (const int64_t block : {int64_t{1}, int64_t{10}, Tq}) {
    auto blocks = torch::full({B, H, Tq, d}, std::numeric_limits<float>::quiet_NaN());
    for (int64_t first = 0; first < Tq; first += block) {
      auto part = shape;
      part.queries = std::min(block, Tq - first);
      auto part_bias = bias;
      part_bias.data += first * bias.q_stride;
      attend_prepared(q.data_ptr<float>() + first * d, queries, *prepared, part_bias,
                      blocks.data_ptr<float>() + first * d, queries, part, 2);
    }
    EXPECT_TRUE(torch::equal(blocks, once)) << "blocks of " << block << " queries";
  }
  auto other = shape;
  other.keys = T - 1;
  EXPECT_THROW(
      attend_prepared(q.data_ptr<float>(), queries, *prepared, bias, once.data_ptr<float>(), queries, other, 2),
      std::invalid_argument);
}

}  // namespace srformer::testing
