// The hand-written CPU kernels (model/kernels/) against products computed in double, over shapes that
// reach every remainder path (inner sizes not a multiple of 8, more than one 512-column pass, output
// counts not a multiple of 4, more than one 32-row group), and the property the server relies on: a
// row's result does not depend on which other rows share the call.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "model/attention/products.h"
#include "model/attention/self_attention.h"
#include "model/kernels/attention_products.h"
#include "model/kernels/avx2.h"
#include "model/kernels/beam_candidates.h"
#include "model/kernels/bf16_linear.h"
#include "model/kernels/few_rows_linear.h"
#include "model/kernels/fp32_attention.h"
#include "model/kernels/fp32_packed_linear.h"
#include "model/kernels/greedy_pick.h"
#include "model/layers.h"
#include "tests/model/attention_kernel_check.h"
#include "tests/support/kernel_switches.h"

namespace {

using srformer::kernels::avx2_fma_available;
using srformer::kernels::avx512_available;
using srformer::kernels::set_avx512;

#define SKIP_WITHOUT_AVX2()                                          \
  if (!avx2_fma_available())                                         \
  GTEST_SKIP() << "this CPU has no AVX2+FMA: the kernels never run " \
                  "here and LibTorch's path is tested elsewhere"

// The instruction sets this CPU can run the projection kernel with (AVX2, and AVX-512 where present).
std::vector<bool> avx512_settings() {
  return srformer::kernels::avx512_available() ? std::vector<bool>{false, true} : std::vector<bool>{false};
}

// Runs `body` once per instruction set, leaving the switch as it was afterwards.
template <typename F>
void for_each_isa(F&& body) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  for (const bool wide : avx512_settings()) {
    srformer::kernels::set_avx512(wide);
    SCOPED_TRACE(wide ? "AVX-512" : "AVX2");
    body();
  }
}

torch::Tensor run_few_rows(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, int threads) {
  auto y = torch::empty({x.size(0), w.size(0)});
  srformer::kernels::few_rows_linear(x.data_ptr<float>(), x.size(0), x.size(1), w.data_ptr<float>(), w.size(0),
                                     b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr<float>(), threads);
  return y;
}

torch::Tensor reference_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto y = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
  return b.defined() ? y + b.to(torch::kFloat64) : y;
}

TEST(EnvSwitch, OffIsZeroFalseOffOrNoInAnyCaseAndAnythingElseIsOn) {
  constexpr const char* kName = "SRFORMER_TEST_SWITCH";
  ::unsetenv(kName);
  EXPECT_TRUE(srformer::kernels::env_not_zero(kName));
  for (const char* off : {"0", "false", "FALSE", "off", "Off", "no"}) {
    ::setenv(kName, off, 1);
    EXPECT_FALSE(srformer::kernels::env_not_zero(kName)) << off;
  }
  for (const char* on : {"1", "true", "on", "yes", ""}) {
    ::setenv(kName, on, 1);
    EXPECT_TRUE(srformer::kernels::env_not_zero(kName)) << on;
  }
  ::unsetenv(kName);
}

TEST(FewRowsLinear, MatchesDoublePrecisionProductInEveryRemainderPath) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(11);
  for_each_isa([] {
    for (const int64_t in : {3, 8, 19, 24, 520, 1030}) {
      for (const int64_t out : {1, 4, 7, 37}) {
        const auto w = torch::randn({out, in});
        const auto b = torch::randn({out});
        for (const int64_t rows : {1, 2, 3, 5, 16, 33}) {
          const auto x = torch::randn({rows, in});
          for (const int threads : {1, 2}) {
            for (const bool with_bias : {false, true}) {
              const auto bias = with_bias ? b : torch::Tensor();
              const auto y = run_few_rows(x, w, bias, threads);
              const double tol = 1e-5 * static_cast<double>(in);
              EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), reference_linear(x, w, bias), tol, tol))
                  << "in=" << in << " out=" << out << " rows=" << rows << " threads=" << threads;
            }
          }
        }
      }
    }
  });
}

TEST(FewRowsLinear, EachRowIsBitIdenticalAloneAndInAnyBatch) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(12);
  const auto w = torch::randn({45, 777});
  const auto b = torch::randn({45});
  const auto x = torch::randn({40, 777});
  for_each_isa([&] {
    const auto together = run_few_rows(x, w, b, 2);
    for (int64_t r = 0; r < x.size(0); ++r) {
      const auto alone = run_few_rows(x.narrow(0, r, 1).contiguous(), w, b, 1);
      ASSERT_TRUE(torch::equal(alone[0], together[r])) << "row " << r;
    }
    // Different neighbourhoods: rows 7..9 and rows 3..13 on their own.
    EXPECT_TRUE(torch::equal(run_few_rows(x.narrow(0, 7, 3).contiguous(), w, b, 2), together.narrow(0, 7, 3)));
    EXPECT_TRUE(torch::equal(run_few_rows(x.narrow(0, 3, 11).contiguous(), w, b, 2), together.narrow(0, 3, 11)));
  });
}

// srformer::linear (the projections of a model loaded without packed weights) gives a row the same bits
// in a call of any number of rows: above 32 rows it took OpenBLAS's sgemm, which sums in another order,
// so a request's logprobs changed once its decode batch grew past 32 rows.
TEST(FewRowsLinear, ModelLinearGivesARowTheSameBitsInACallOfAnySize) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  SKIP_WITHOUT_CPU_KERNELS();
  torch::manual_seed(14);
  const auto w = torch::randn({48, 96});
  const auto b = torch::randn({48});
  const auto x = torch::randn({321, 96});
  torch::NoGradGuard no_grad;
  for (const int64_t rows : {1, 32, 33, 64, 321}) {
    const auto together = srformer::linear(x.narrow(0, 0, rows), w, b);
    for (int64_t r = 0; r < rows; r += 16) {
      ASSERT_TRUE(torch::equal(srformer::linear(x.narrow(0, r, 1), w, b)[0], together[r]))
          << rows << " rows, row " << r;
    }
  }
}

TEST(FewRowsLinear, ModelLinearUsesItForDecodeRowsAndStaysDifferentiableForTraining) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  SKIP_WITHOUT_CPU_KERNELS();
  torch::manual_seed(13);
  auto w = torch::randn({24, 40});
  const auto b = torch::randn({24});
  const auto x = torch::randn({6, 1, 40});
  {
    torch::NoGradGuard no_grad;
    const auto batch = srformer::linear(x, w, b);
    ASSERT_EQ(batch.sizes().vec(), (std::vector<int64_t>{6, 1, 24}));
    for (int64_t r = 0; r < 6; ++r) EXPECT_TRUE(torch::equal(srformer::linear(x[r], w, b), batch[r]));
    // LibTorch's path gives the same numbers to rounding.
    srformer::kernels::set_cpu_kernels(false);
    const auto blas = srformer::linear(x, w, b);
    srformer::kernels::set_cpu_kernels(true);
    EXPECT_FALSE(torch::equal(blas, batch)) << "the switch did not change the path taken";
    EXPECT_TRUE(torch::allclose(blas, batch, 1e-5, 1e-5));
  }
  w.set_requires_grad(true);
  srformer::linear(x, w, b).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(torch::allclose(w.grad(), x.view({6, 40}).sum(0).expand({24, 40}), 1e-5, 1e-5));
}

#define SKIP_WITHOUT_PACKED()                   \
  if (!srformer::kernels::avx2_fma_available()) \
  GTEST_SKIP() << "this CPU has no AVX2+FMA: projections take LibTorch's path"

torch::Tensor run_packed(const srformer::kernels::Fp32PackedMatrix& m, const torch::Tensor& x, int threads) {
  auto y = torch::empty({x.size(0), m.out()});
  m.multiply(x.data_ptr<float>(), x.size(0), y.data_ptr<float>(), threads);
  return y;
}

TEST(Fp32PackedLinear, MatchesDoublePrecisionProductForEveryPanelAndRowRemainder) {
  SKIP_WITHOUT_PACKED();
  torch::manual_seed(14);
  for_each_isa([] {
    // out: inside one panel, exactly one, a partial last panel, several, a partial last 64-column block;
    // rows: the AVX2 blocks' 1–3, every remainder of 6 and past one 48-row work item.
    for (const int64_t in : {1, 7, 64, 515}) {
      for (const int64_t out : {1, 9, 16, 17, 64, 130}) {
        const auto w = torch::randn({out, in});
        const auto b = torch::randn({out});
        for (const bool with_bias : {false, true}) {
          const srformer::kernels::Fp32PackedMatrix m(w.data_ptr<float>(), out, in,
                                                      with_bias ? b.data_ptr<float>() : nullptr);
          ASSERT_EQ(m.out(), out);
          ASSERT_EQ(m.in(), in);
          for (const int64_t rows : {1, 2, 3, 4, 5, 6, 7, 13, 40, 49, 100}) {
            const auto x = torch::randn({rows, in});
            for (const int threads : {1, 2}) {
              const auto y = run_packed(m, x, threads);
              const double tol = 1e-5 * static_cast<double>(in);
              EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64),
                                          reference_linear(x, w, with_bias ? b : torch::Tensor()), tol, tol))
                  << "in=" << in << " out=" << out << " rows=" << rows << " threads=" << threads
                  << " bias=" << with_bias;
            }
          }
        }
      }
    }
  });
}

TEST(Fp32PackedLinear, EachRowIsBitIdenticalAloneAndInAnyBatchOrThreadCount) {
  SKIP_WITHOUT_PACKED();
  torch::manual_seed(15);
  const auto w = torch::randn({300, 777});
  const auto b = torch::randn({300});
  const auto x = torch::randn({110, 777});  // three blocks of rows for the threads to share
  for_each_isa([&] {
    const srformer::kernels::Fp32PackedMatrix m(w.data_ptr<float>(), 300, 777, b.data_ptr<float>());
    const auto together = run_packed(m, x, 2);
    for (int64_t r = 0; r < x.size(0); ++r) {
      ASSERT_TRUE(torch::equal(run_packed(m, x.narrow(0, r, 1).contiguous(), 1)[0], together[r])) << "row " << r;
    }
    EXPECT_TRUE(torch::equal(run_packed(m, x.narrow(0, 7, 3).contiguous(), 2), together.narrow(0, 7, 3)));
    EXPECT_TRUE(torch::equal(run_packed(m, x.narrow(0, 3, 11).contiguous(), 2), together.narrow(0, 3, 11)));
  });
}

TEST(Fp32PackedLinear, AvxTwoAndAvx512GiveTheSameBitsWhicheverPackedIt) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  SKIP_WITHOUT_PACKED();
  if (!srformer::kernels::avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512F: only the AVX2 form runs here";
  torch::manual_seed(17);
  const auto w = torch::randn({201, 515});  // a partial last panel and a partial last 64-column block
  const auto b = torch::randn({201});
  const auto x = torch::randn({37, 515});  // 37 rows: AVX-512 blocks of 6 and a remainder of 1
  srformer::kernels::set_avx512(true);
  const srformer::kernels::Fp32PackedMatrix packed_by_avx512(w.data_ptr<float>(), 201, 515, b.data_ptr<float>());
  const auto by_avx512 = run_packed(packed_by_avx512, x, 2);
  srformer::kernels::set_avx512(false);
  const srformer::kernels::Fp32PackedMatrix packed_by_avx2(w.data_ptr<float>(), 201, 515, b.data_ptr<float>());
  const auto by_avx2 = run_packed(packed_by_avx2, x, 2);
  // One layout: a matrix packed under either instruction set multiplies under the other.
  const auto avx512_packed_by_avx2 = run_packed(packed_by_avx512, x, 2);
  srformer::kernels::set_avx512(true);
  const auto avx2_packed_by_avx512 = run_packed(packed_by_avx2, x, 1);
  EXPECT_TRUE(torch::equal(by_avx2, by_avx512));
  EXPECT_TRUE(torch::equal(avx512_packed_by_avx2, by_avx512));
  EXPECT_TRUE(torch::equal(avx2_packed_by_avx512, by_avx512));
  EXPECT_TRUE(torch::allclose(by_avx2.to(torch::kFloat64), reference_linear(x, w, b), 1e-2, 1e-2));
}

TEST(Fp32PackedLinear, ModelLinearUsesItWhilePackedAndFallsBackWhenSwitchedOffOrTracked) {
  SKIP_WITHOUT_CPU_KERNELS();
  SKIP_WITHOUT_PACKED();
  torch::manual_seed(16);
  srformer::Linear l;
  l.weight = torch::randn({70, 40});
  l.bias = torch::randn({70});
  l.pack_fp32();
  ASSERT_TRUE(l.packed_fp32);
  const auto x = torch::randn({5, 1, 40});
  const srformer::kernels::Fp32PackedMatrix m(l.weight.data_ptr<float>(), 70, 40, l.bias.data_ptr<float>());
  {
    torch::NoGradGuard no_grad;
    const auto packed = l(x);
    ASSERT_EQ(packed.sizes().vec(), (std::vector<int64_t>{5, 1, 70}));
    EXPECT_TRUE(torch::equal(packed.view({5, 70}), run_packed(m, x.view({5, 40}).contiguous(), 1)));
    // Switched off: the row-major weight's kernel, the same numbers to rounding, not the same bits.
    srformer::kernels::set_fp32_packed(false);
    const auto row_major = l(x);
    srformer::kernels::set_fp32_packed(true);
    EXPECT_FALSE(torch::equal(row_major, packed)) << "the switch did not change the path taken";
    EXPECT_TRUE(torch::allclose(row_major, packed, 1e-5, 1e-5));
    EXPECT_TRUE(torch::equal(row_major, srformer::linear(x, l.weight, l.bias)));
    // An encoder's many rows take it too, each row with the bits it gets alone.
    const auto many = torch::randn({1000, 40});
    const auto y = l(many);
    EXPECT_TRUE(torch::equal(y, run_packed(m, many, 2)));
    EXPECT_TRUE(torch::equal(y[777], run_packed(m, many.narrow(0, 777, 1).contiguous(), 1)[0]));
  }
  // Training: autograd tracks the weight, so the packed copy is never read.
  l.weight.set_requires_grad(true);
  l(x).sum().backward();
  ASSERT_TRUE(l.weight.grad().defined());
  EXPECT_TRUE(torch::allclose(l.weight.grad(), x.view({5, 40}).sum(0).expand({70, 40}), 1e-5, 1e-5));
}

TEST(SingleQueryAttention, ProductsMatchDoublePrecisionMatmul) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(14);
  for (const int64_t d : {5, 8, 32, 64, 72, 130}) {
    for (const int64_t T : {1, 7, 64}) {
      const auto q = torch::randn({3, 2, 1, d});
      const auto k = torch::randn({3, 2, T, d});
      const auto v = torch::randn({3, 2, T, d});
      const auto p = torch::softmax(torch::randn({3, 2, 1, T}), -1);
      const auto scores = srformer::query_key_product(q, k);
      const auto out = srformer::weights_value_product(p, v);
      const auto ref_scores = torch::matmul(q.to(torch::kFloat64), k.to(torch::kFloat64).transpose(-1, -2));
      const auto ref_out = torch::matmul(p.to(torch::kFloat64), v.to(torch::kFloat64));
      ASSERT_EQ(scores.sizes().vec(), ref_scores.sizes().vec());
      ASSERT_EQ(out.sizes().vec(), ref_out.sizes().vec());
      EXPECT_TRUE(torch::allclose(scores.to(torch::kFloat64), ref_scores, 1e-4, 1e-4)) << "d=" << d << " T=" << T;
      EXPECT_TRUE(torch::allclose(out.to(torch::kFloat64), ref_out, 1e-5, 1e-5)) << "d=" << d << " T=" << T;
    }
  }
}

TEST(SingleQueryAttention, SegmentKeysTimesValuesMatchDoublePrecision) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(17);
  for (const int64_t d : {5, 32, 64, 72}) {
    for (const int64_t T : {1, 16, 64, 600}) {  // 600: past the kernel's limit, LibTorch's matmul
      const auto k = torch::randn({2, 3, T, d});
      const auto v = torch::randn({2, 3, T, d});
      const auto kv = srformer::keys_values_product(k, v);
      const auto ref = torch::matmul(k.to(torch::kFloat64).transpose(-1, -2), v.to(torch::kFloat64));
      ASSERT_EQ(kv.sizes().vec(), ref.sizes().vec());
      const double tol = 1e-5 * static_cast<double>(T);
      EXPECT_TRUE(torch::allclose(kv.to(torch::kFloat64), ref, tol, tol)) << "d=" << d << " T=" << T;
    }
  }
}

TEST(SingleQueryAttention, StridedViewsAndSeveralQueriesGiveTheMatmulResult) {
  torch::manual_seed(15);
  // Keys as a transposed view (heads split from [B, T, H*d]), as split_heads produces them.
  const auto k = torch::randn({2, 9, 3 * 16}).view({2, 9, 3, 16}).transpose(1, 2);
  const auto q = torch::randn({2, 1, 3 * 16}).view({2, 1, 3, 16}).transpose(1, 2);
  ASSERT_FALSE(k.is_contiguous());
  EXPECT_TRUE(torch::allclose(srformer::query_key_product(q, k), torch::matmul(q, k.transpose(-1, -2)), 1e-5, 1e-5));
  // Two queries per group (teacher forcing) take LibTorch's matmul.
  const auto q2 = torch::randn({2, 3, 2, 16});
  EXPECT_TRUE(torch::allclose(srformer::query_key_product(q2, k), torch::matmul(q2, k.transpose(-1, -2))));
  const auto p2 = torch::softmax(torch::randn({2, 3, 2, 9}), -1);
  const auto v = torch::randn({2, 3, 9, 16});
  EXPECT_TRUE(torch::allclose(srformer::weights_value_product(p2, v), torch::matmul(p2, v)));
}

// A self-attention cache is a view of the first T slots of a buffer with room for more: the kernels
// read it where it lies and give exactly what they give on a dense copy.
TEST(SingleQueryAttention, CacheViewsWithRoomGiveTheDenseResult) {
  torch::manual_seed(16);
  const auto buffer = torch::randn({2, 3, 20, 16});
  const auto k = buffer.narrow(2, 0, 9);
  ASSERT_FALSE(k.is_contiguous());
  const auto q = torch::randn({2, 3, 1, 16});
  const auto p = torch::softmax(torch::randn({2, 3, 1, 9}), -1);
  EXPECT_TRUE(torch::equal(srformer::query_key_product(q, k), srformer::query_key_product(q, k.contiguous())));
  EXPECT_TRUE(torch::equal(srformer::weights_value_product(p, k), srformer::weights_value_product(p, k.contiguous())));
  EXPECT_TRUE(torch::allclose(srformer::query_key_product(q, k), torch::matmul(q, k.transpose(-1, -2)), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(srformer::weights_value_product(p, k), torch::matmul(p, k), 1e-5, 1e-5));
}

TEST(SingleQueryAttention, EachGroupIsIndependentOfTheOthers) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(16);
  const auto q = torch::randn({5, 4, 1, 64});
  const auto k = torch::randn({5, 4, 33, 64});
  const auto all = srformer::query_key_product(q, k);
  const auto p = torch::softmax(all, -1);
  const auto out = srformer::weights_value_product(p, k);
  for (int64_t b = 0; b < 5; ++b) {
    const auto row = torch::indexing::Slice(b, b + 1);
    EXPECT_TRUE(torch::equal(srformer::query_key_product(q.index({row}), k.index({row})), all.index({row})));
    EXPECT_TRUE(torch::equal(srformer::weights_value_product(p.index({row}), k.index({row})), out.index({row})));
  }
}

// Keys a row does not read (zero weight: masked keys, padding to a longer row) change no bits of p V
// or Kᵀ V (zero-padded positions), at every head size: a row's result is the same alone and padded
// in a batch. Head sizes no multiple of 8 have columns past the vectors, which got other bits once the
// padding shifted which terms GCC summed four at a time.
TEST(SingleQueryAttention, KeysOfZeroWeightAfterARowsOwnChangeNoBitsAtAnyHeadSize) {
  SKIP_WITHOUT_CPU_KERNELS();  // LibTorch's matmul makes no such promise
  torch::manual_seed(18);
  for (int64_t d = 1; d <= 21; ++d) {
    for (const int64_t T : {1, 5, 9, 13}) {
      const auto p = torch::softmax(torch::randn({1, 2, 1, T}), -1);
      const auto v = torch::randn({1, 2, T, d});
      const auto k = torch::randn({1, 2, T, d});
      const auto want = srformer::weights_value_product(p, v);
      const auto want_kv = srformer::keys_values_product(k, v);
      for (const int64_t padded : {T + 1, T + 3, T + 6, T + 40}) {
        const auto pad = [&](const torch::Tensor& x, double value) {
          return torch::constant_pad_nd(x, {0, 0, 0, padded - T}, value);
        };
        const auto p_padded = torch::constant_pad_nd(p, {0, padded - T}, 0.0);  // masked: probability 0
        const auto got = srformer::weights_value_product(p_padded, pad(v, 1.5));
        EXPECT_TRUE(torch::equal(got, want))
            << "d=" << d << " T=" << T << " padded to " << padded << ": " << (got - want).abs().max().item<double>();
        const auto got_kv = srformer::keys_values_product(pad(k, 0.0), pad(v, 0.0));
        EXPECT_TRUE(torch::equal(got_kv, want_kv)) << "Kᵀ V, d=" << d << " T=" << T << " padded to " << padded;
      }
    }
  }
}

// One decode step over caches whose slots lie in other rows (beams sharing slots): the result of
// attend() over the slots gathered into each row, for head sizes that reach every remainder path of
// the products; a row's result depends on nothing but its own slots (not on the other rows, the
// thread count, or which rows hold its slots); masked slots contribute nothing.
TEST(SlotAttention, MatchesAttendOverEachRowsGatheredSlots) {
  SKIP_WITHOUT_CPU_KERNELS();
  torch::manual_seed(21);
  for (const auto& [slots, d] : {std::pair<int64_t, int64_t>{1, 8}, {7, 20}, {33, 64}, {50, 72}, {12, 136}}) {
    SCOPED_TRACE("T=" + std::to_string(slots) + " d=" + std::to_string(d));
    const int64_t B = 4, H = 3, rows_held = 6;
    // Caches with room for more slots (as a decode step leaves them), more rows than the batch.
    const auto k = torch::randn({rows_held, H, slots + 5, d}).narrow(2, 0, slots);
    const auto v = torch::randn({rows_held, H, slots + 5, d}).narrow(2, 0, slots);
    const auto src = torch::randint(0, rows_held, {B, slots}, torch::kInt32);
    const auto q = torch::randn({B, H, 1, d}) * 0.5;
    auto allowed = torch::ones({B, 1, 1, slots}, torch::kBool);
    if (slots > 3) allowed[2].narrow(-1, 0, 3).fill_(false);  // a row that joined later: leading slots unused
    const auto bias = srformer::additive_mask(allowed, torch::kFloat32) + torch::randn({1, H, 1, slots});
    // Reference: each row's slots gathered into a [B, H, T, d] copy.
    const auto gather = [&](const torch::Tensor& cache, const torch::Tensor& rows) {
      const auto t = torch::arange(slots, torch::kLong).view({1, slots}).expand({rows.size(0), slots});
      return cache.permute({0, 2, 1, 3}).index({rows.to(torch::kLong), t}).permute({0, 2, 1, 3});
    };
    const auto exact = srformer::attend(q, gather(k, src), gather(v, src), bias);
    const auto fast = srformer::attend_slots(q, k, v, src, bias);
    EXPECT_LT((fast - exact).abs().max().item<double>(), 2e-6);
    at::set_num_threads(1);
    EXPECT_TRUE(torch::equal(srformer::attend_slots(q, k, v, src, bias), fast)) << "one thread";
    at::set_num_threads(2);
    // Row 1 alone, and with its slots moved into its own rows of a dense copy: bit for bit.
    const auto row = torch::indexing::Slice(1, 2);
    const auto alone = srformer::attend_slots(q.index({row}), k, v, src.index({row}), bias.index({row}));
    EXPECT_TRUE(torch::equal(alone, fast.index({row})));
    const auto own = torch::zeros({1, slots}, torch::kInt32);
    EXPECT_TRUE(torch::equal(srformer::attend_slots(q.index({row}), gather(k, src.index({row})).contiguous(),
                                                    gather(v, src.index({row})).contiguous(), own, bias.index({row})),
                             alone));
    // Row 2's masked slots: whatever they hold changes nothing for it.
    if (slots > 3) {
      auto k2 = k.clone(), v2 = v.clone();
      for (int64_t t = 0; t < 3; ++t) {
        const int64_t r = src[2][t].item<int32_t>();
        k2[r].select(1, t).fill_(1e3);
        v2[r].select(1, t).fill_(-1e3);
      }
      EXPECT_TRUE(torch::equal(srformer::attend_slots(q, k2, v2, src, bias)[2], fast[2]));
    }
  }
  EXPECT_THROW(srformer::attend_slots(torch::randn({2, 1, 1, 8}), torch::randn({2, 1, 3, 8}),
                                      torch::randn({2, 1, 3, 8}), torch::zeros({2, 3}, torch::kLong), {}),
               std::invalid_argument)
      << "int64 slot rows";
  EXPECT_THROW(srformer::attend_slots(torch::randn({2, 1, 1, 8}), torch::randn({2, 1, 3, 8}),
                                      torch::randn({2, 1, 3, 8}), torch::full({2, 3}, 2, torch::kInt32), {}),
               std::out_of_range)
      << "a row the caches do not have";
}

}  // namespace

// Greedy search's pick: argmax (first on ties) and log_softmax at it, against double precision, with
// excluded (-inf) tokens, lengths that are not a multiple of 8 or 16, and NaN / all-excluded rows
// refused; on each instruction set (the sum of exponentials runs on 16 lanes with AVX-512).
namespace {

void expect_greedy_pick_matches_double() {
  torch::manual_seed(5);
  for (const int64_t n : {1, 7, 8, 9, 24, 255, 257, 264, 4099, 32128, 50265}) {
    auto x = torch::randn({n}) * 4.0;
    if (n > 20) {
      x.narrow(0, n - 10, 10).fill_(-std::numeric_limits<float>::infinity());  // a vocabulary limit
      x[3] = -std::numeric_limits<float>::infinity();                          // a masked EOS
      x[n / 2] = 30.0F;                                                        // a tie: the first wins
      x[n - 12] = 30.0F;
    }
    const auto pick = srformer::kernels::greedy_pick(x.data_ptr<float>(), n);
    ASSERT_TRUE(pick.has_value()) << n;
    EXPECT_EQ(pick->token, x.argmax().item<int64_t>()) << n;
    const double expected = x.to(torch::kFloat64).log_softmax(0)[pick->token].item<double>();
    EXPECT_NEAR(pick->logprob, expected, 1e-6 * (1.0 + std::abs(expected))) << n;
  }
  auto nan_row = torch::zeros({40});
  nan_row[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(srformer::kernels::greedy_pick(nan_row.data_ptr<float>(), 40).has_value());
  const auto none = torch::full({12}, -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(srformer::kernels::greedy_pick(none.data_ptr<float>(), 12).has_value());
}

}  // namespace

TEST(GreedyPick, MatchesArgmaxAndLogSoftmaxInDouble) {
  for_each_isa([] { expect_greedy_pick_matches_double(); });
}

// The pick with a vocabulary limit and excluded tokens applied as it reads equals, bit for bit, the
// pick over a copy with those scores set to -inf: limits inside a block, inside the scalar tail and at
// the end; exclusions at the maximum, repeated and past the limit; NaN only where it is excluded.
TEST(GreedyPick, ExclusionsAppliedWhileReadingEqualAMaskedCopy) {
  for_each_isa([] {
    torch::manual_seed(11);
    const float inf = std::numeric_limits<float>::infinity();
    int checked = 0;
    for (const int64_t n : {5, 8, 13, 300, 4099, 32128}) {
      for (const int64_t limit : {n, n - 1, n - 3, n / 2 + 3, int64_t{4}}) {
        if (limit < 1) continue;
        auto x = torch::randn({n}) * 4.0;
        x[n - 1] = 50.0F;  // past most limits: the unmasked maximum
        const auto first_max = x.narrow(0, 0, limit).argmax().item<int64_t>();
        std::vector<int64_t> excluded{0, first_max, first_max, std::min<int64_t>(limit - 1, 2), n - 1};
        std::sort(excluded.begin(), excluded.end());
        if (limit < n) x[limit] = std::numeric_limits<float>::quiet_NaN();  // read by neither
        x[0] = std::numeric_limits<float>::quiet_NaN();                     // excluded
        auto copy = x.clone();
        copy.narrow(0, limit, n - limit).fill_(-inf);
        for (const int64_t e : excluded) copy[e] = -inf;
        const auto expected = srformer::kernels::greedy_pick(copy.data_ptr<float>(), n);
        const auto pick = srformer::kernels::greedy_pick(x.data_ptr<float>(), n, limit, excluded);
        ASSERT_EQ(pick.has_value(), expected.has_value()) << n << " " << limit;
        if (!pick) continue;
        EXPECT_EQ(pick->token, expected->token) << n << " " << limit;
        EXPECT_EQ(pick->logprob, expected->logprob) << n << " " << limit;  // the same sums in the same order
        EXPECT_NE(pick->token, first_max);
        ++checked;
      }
    }
    EXPECT_GT(checked, 20);
    // A NaN the pick reads is refused; every token excluded leaves nothing to pick.
    auto row = torch::zeros({40});
    row[17] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(srformer::kernels::greedy_pick(row.data_ptr<float>(), 40, 40, {}).has_value());
    EXPECT_TRUE(srformer::kernels::greedy_pick(row.data_ptr<float>(), 40, 40, {17}).has_value());
    EXPECT_TRUE(srformer::kernels::greedy_pick(row.data_ptr<float>(), 40, 17, {}).has_value());
    EXPECT_FALSE(srformer::kernels::greedy_pick(row.data_ptr<float>(), 40, 3, {0, 1, 2}).has_value());
  });
}

namespace {

using BeamRef = std::vector<std::pair<double, int64_t>>;

// Beam search's candidates the way Hugging Face computes them: log_softmax over each whole row (here
// in double, rounded to float), -inf at excluded tokens and past the limit, plus the float beam score;
// the `count` best by score, ties by index.
BeamRef reference_beam_candidates(const torch::Tensor& x, const std::vector<float>& beam, int64_t limit,
                                  const std::vector<std::vector<int64_t>>& excluded, int64_t count) {
  const auto lsm = x.to(torch::kFloat64).log_softmax(1).contiguous();
  const auto scores = lsm.accessor<double, 2>();
  BeamRef all;
  const int64_t n = x.size(1);
  for (int64_t b = 0; b < x.size(0); ++b) {
    for (int64_t i = 0; i < limit; ++i) {
      const auto& ex = excluded[static_cast<size_t>(b)];
      if (std::find(ex.begin(), ex.end(), i) != ex.end()) continue;
      // float, as the searcher adds them: a beam at -1e9 makes its candidates tie at -1e9
      const float score = static_cast<float>(scores[b][i]) + beam[static_cast<size_t>(b)];
      all.emplace_back(score, b * n + i);
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& c) {
    return a.first > c.first || (a.first == c.first && a.second < c.second);
  });
  all.resize(static_cast<size_t>(std::min<int64_t>(count, static_cast<int64_t>(all.size()))));
  return all;
}

std::optional<std::vector<srformer::kernels::BeamCandidate>> run_beam_candidates(
    const torch::Tensor& x, const std::vector<float>& beam, int64_t limit,
    const std::vector<std::vector<int64_t>>& excluded, int64_t count) {
  srformer::kernels::BeamRows rows;
  rows.x = x.data_ptr<float>();
  rows.rows = x.size(0);
  rows.n = x.size(1);
  rows.beam_scores = beam.data();
  rows.limit = limit;
  rows.excluded = excluded;
  for (auto& e : rows.excluded) std::sort(e.begin(), e.end());
  return srformer::kernels::beam_candidates(rows, count);
}

}  // namespace

// The candidates read from the logits in place are Hugging Face's (log_softmax over the whole row,
// processors after it, beam scores added, topk): the same tokens in the same order, scores to float
// rounding, over vocabulary sizes with every tail length, limits, exclusions at each row's best token,
// and beams far behind (-1e9, as at the first step).
TEST(BeamCandidates, MatchHuggingFaceScoresAndOrder) {
  for_each_isa([] {
    torch::manual_seed(21);
    int checked = 0;
    for (const int64_t n : {7, 37, 1000, 4099, 32128, 50265}) {
      for (const int64_t beams : {1, 2, 4, 5}) {
        for (const bool far_behind : {false, true}) {
          const auto x = torch::randn({beams, n}) * 4.0;
          std::vector<float> beam;
          for (int64_t b = 0; b < beams; ++b) {
            beam.push_back(far_behind && b > 0 ? -1e9F : -20.0F * torch::rand({1}).item<float>());
          }
          const int64_t limit = n > 40 ? n - n / 7 : n;
          std::vector<std::vector<int64_t>> excluded;
          for (int64_t b = 0; b < beams; ++b) {
            const auto best = x[b].narrow(0, 0, limit).argmax().item<int64_t>();
            excluded.push_back({best, (best * 7 + 3) % limit, best});
          }
          const int64_t count = std::min<int64_t>(2 * beams, beams * (limit - 2));
          const auto got = run_beam_candidates(x, beam, limit, excluded, count);
          const auto want = reference_beam_candidates(x, beam, limit, excluded, count);
          ASSERT_TRUE(got.has_value()) << n << " " << beams;
          ASSERT_EQ(got->size(), want.size()) << n << " " << beams;
          for (size_t j = 0; j < want.size(); ++j) {
            EXPECT_EQ((*got)[j].index, want[j].second) << n << " " << beams << " rank " << j;
            EXPECT_NEAR((*got)[j].score, want[j].first, 2e-6 * (1.0 + std::abs(want[j].first)));
          }
          ++checked;
        }
      }
    }
    EXPECT_EQ(checked, 48);
  });
}

// Equal scores keep torch::topk's order: the lower index first, within a row and across rows (beams
// that are still identical); rows with a NaN, too few candidates or only -inf are left to the
// general path.
TEST(BeamCandidates, TiesByIndexAndRefusals) {
  for_each_isa([] {
    // Integer scores: many equal ones in each row, and two identical rows with equal beam scores.
    const auto row = torch::remainder(torch::arange(100, torch::kFloat32) * 37.0F, 5.0F);
    const auto x = torch::stack({row, row, row * 0.5F});
    const std::vector<float> beam{-1.0F, -1.0F, -50.0F};
    const std::vector<std::vector<int64_t>> none(3);
    const auto got = run_beam_candidates(x, beam, 100, none, 30);
    ASSERT_TRUE(got.has_value());
    std::vector<int64_t> fours;  // the 40 best tie: row 0's 20, then row 1's first 10
    for (int64_t i = 0; i < 200 && fours.size() < 30; ++i) {
      if (row[i % 100].item<float>() == 4.0F) fours.push_back(i);
    }
    for (size_t j = 0; j < fours.size(); ++j) {
      EXPECT_EQ((*got)[j].index, fours[j]) << "rank " << j;
      EXPECT_EQ((*got)[j].score, (*got)[0].score) << "rank " << j;
    }

    auto nan = x.clone();
    nan[1][50] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_FALSE(run_beam_candidates(nan, beam, 100, none, 6).has_value());
    EXPECT_FALSE(run_beam_candidates(x, beam, 2, none, 7).has_value()) << "6 candidates below the limit";
    std::vector<std::vector<int64_t>> most(3);
    for (int64_t i = 0; i < 99; ++i) most[0].push_back(i), most[1].push_back(i), most[2].push_back(i);
    EXPECT_FALSE(run_beam_candidates(x, beam, 100, most, 4).has_value()) << "3 candidates left";
    EXPECT_TRUE(run_beam_candidates(x, beam, 100, most, 3).has_value());
    auto inf = x.clone();
    inf.narrow(1, 0, 98).fill_(-std::numeric_limits<float>::infinity());
    EXPECT_FALSE(run_beam_candidates(inf, beam, 100, none, 7).has_value()) << "6 finite candidates";
  });
}

// The general path's choice (processed log-probabilities, a sequence bias among the processors) read
// with a bar (kernels::best_processed_candidates) is the heap's over every score offered in index order,
// bit for bit: scores, indices, logprobs and order, over rows of every tail length, many equal scores
// (integer scores, two beams still alike), -inf tokens (a vocabulary limit) and beams far behind (-1e9).
// Rows with NaN or +inf, and too few finite scores, are left to the heap.
TEST(BeamCandidates, ProcessedScoresChooseAsTheHeapOverEveryScore) {
  using srformer::kernels::BeamCandidate;
  const auto heap = [](const torch::Tensor& x, const std::vector<float>& beam, int64_t count) {
    srformer::kernels::BestCandidates best(count);
    const auto a = x.accessor<float, 2>();
    for (int64_t b = 0; b < x.size(0); ++b) {
      for (int64_t i = 0; i < x.size(1); ++i)
        best.offer(a[b][i] + beam[static_cast<size_t>(b)], b * x.size(1) + i, a[b][i]);
    }
    return std::move(best).sorted();
  };
  const auto bar = [](const torch::Tensor& x, const std::vector<float>& beam, int64_t count) {
    return srformer::kernels::best_processed_candidates(x.data_ptr<float>(), x.size(0), x.size(1), beam.data(), count);
  };
  torch::manual_seed(5);
  int checked = 0;
  for (const int64_t n : {7, 37, 100, 4099, 32128}) {
    for (const int64_t beams : {1, 2, 4}) {
      for (const bool integers : {false, true}) {
        for (const bool far_behind : {false, true}) {
          auto x = integers ? torch::round(torch::randn({beams, n}) * 2.0) : torch::randn({beams, n}) * 4.0;
          x = x.log_softmax(1);
          x.narrow(1, 0, std::min<int64_t>(n, 5)).add_(torch::randn({beams, std::min<int64_t>(n, 5)}));  // biased
          if (n > 40) x.narrow(1, n - n / 7, n / 7).fill_(-std::numeric_limits<float>::infinity());
          if (beams > 1) x[1].copy_(x[0]);
          std::vector<float> beam;
          for (int64_t b = 0; b < beams; ++b) {
            beam.push_back(far_behind && b > 0 ? -1e9F : -3.0F * static_cast<float>(b > 1 ? b : 0));
          }
          for (const int64_t count : {2 * beams, 3 * beams + 1}) {
            const auto got = bar(x, beam, count);
            const auto want = heap(x, beam, count);
            ASSERT_TRUE(got.has_value()) << n << " " << beams;
            ASSERT_EQ(got->size(), want.size());
            for (size_t j = 0; j < want.size(); ++j) {
              EXPECT_EQ((*got)[j].index, want[j].index) << n << " " << beams << " rank " << j;
              EXPECT_EQ((*got)[j].score, want[j].score) << n << " " << beams << " rank " << j;
              EXPECT_EQ((*got)[j].logprob, want[j].logprob) << n << " " << beams << " rank " << j;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 120);

  const auto x = torch::randn({3, 100}).log_softmax(1);
  const std::vector<float> beam{0.0F, -1.0F, -2.0F};
  ASSERT_TRUE(bar(x, beam, 6).has_value());
  for (const float odd : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    for (const int64_t at : {0, 57, 99}) {  // wherever it lies, below the bar too
      auto with = x.clone();
      with[2][at] = odd;
      EXPECT_FALSE(bar(with, beam, 6).has_value()) << odd << " at " << at;
    }
  }
  auto few = x.clone();
  few.narrow(1, 2, 98).fill_(-std::numeric_limits<float>::infinity());
  EXPECT_FALSE(bar(few, beam, 7).has_value()) << "6 finite scores";
  EXPECT_TRUE(bar(few, beam, 6).has_value());
}

// Attention's softmax row: against double precision, and bit for bit the same when masked keys follow
// the row's own (a row padded to a longer one in its batch, the next rows' windows or global tokens).
// Before, the keys past the last whole block of 8 were summed after the blocks' lanes, so a row gave
// other bits padded than alone, and a request's summary could depend on its batch.
TEST(CpuKernels, SoftmaxRowMatchesDoubleAndIgnoresMaskedKeysAfterIt) {
  SKIP_WITHOUT_AVX2();
  torch::manual_seed(5);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t n = 1; n <= 40; ++n) {
    const auto x = torch::randn({n}) * 4;
    auto alone = x.clone();
    srformer::kernels::softmax_rows(alone.data_ptr<float>(), 1, n);
    const auto want = x.to(torch::kFloat64).softmax(0);
    EXPECT_LE((alone.to(torch::kFloat64) - want).abs().max().item<double>(), 1e-6) << n << " keys";
    for (const int64_t pad : {1, 7, 8, 9, 23}) {
      auto padded = torch::cat({x, torch::full({pad}, ninf)});  // a key mask adds -inf
      srformer::kernels::softmax_rows(padded.data_ptr<float>(), 1, n + pad);
      EXPECT_TRUE(torch::equal(padded.narrow(0, 0, n), alone)) << n << " keys, " << pad << " masked after them";
      EXPECT_TRUE(torch::equal(padded.narrow(0, n, pad), torch::zeros({pad}))) << n << " keys, " << pad << " masked";
    }
  }
}

#define SKIP_WITHOUT_FP32_ATTENTION()                 \
  if (!srformer::kernels::fp32_attention_available()) \
  GTEST_SKIP() << "this CPU has no AVX2+FMA: the encoder's fp32 attention kernel never runs here"

// Runs `check` with the AVX-512 blocks (where the CPU has them) and with the AVX2 ones.
template <typename F>
void for_each_instruction_set(F&& check) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  for (const bool avx512 : {true, false}) {
    if (avx512 && !avx512_available()) continue;
    SCOPED_TRACE(avx512 ? "AVX-512" : "AVX2");
    set_avx512(avx512);
    check();
  }
}

// The encoder's fp32 attention kernel gives LibTorch's attend() to float rounding, with masks,
// position bias and strided operands; a group's result depends on nothing but its own operands.
TEST(Fp32Attention, MatchesLibTorchAttentionWithMasksAndPositionBias) {
  SKIP_WITHOUT_FP32_ATTENTION();
  for_each_instruction_set(
      [] { srformer::testing::expect_attention_kernel_matches_attend(srformer::attend_fp32_kernel, 2e-6); });
}

TEST(Fp32Attention, QueryWithEveryKeyMaskedGetsZeros) {
  SKIP_WITHOUT_FP32_ATTENTION();
  for_each_instruction_set(
      [] { srformer::testing::expect_fully_masked_query_gets_zeros(srformer::attend_fp32_kernel); });
}

// kᵀ prepared once for several blocks of queries (a long input's attention in pieces): the same bits as
// one call, on either instruction set; keys prepared by the bf16 kernel are refused.
TEST(Fp32Attention, KeysPreparedOnceGiveEveryBlockOfQueriesTheSameBits) {
  SKIP_WITHOUT_FP32_ATTENTION();
  using srformer::kernels::fp32_attention;
  for_each_instruction_set([] {
    srformer::testing::expect_prepared_keys_give_the_same_bits(fp32_attention, srformer::kernels::fp32_attention_keys,
                                                               fp32_attention);
  });
  if (!srformer::kernels::cpu_bf16_available()) return;
  const auto q = torch::randn({1, 1, 2, 8}), kv = torch::randn({1, 1, 4, 8});
  const srformer::kernels::AttentionShape shape{1, 1, 2, 4, 8};
  const auto layout = srformer::kernels::HeadLayout::heads_outer(1, 4, 8);
  const auto bf16_keys =
      srformer::kernels::bf16_attention_keys(kv.data_ptr<float>(), layout, kv.data_ptr<float>(), layout, shape, 1);
  auto out = torch::zeros({1, 1, 2, 8});
  EXPECT_THROW(fp32_attention(q.data_ptr<float>(), srformer::kernels::HeadLayout::heads_outer(1, 2, 8), *bf16_keys, {},
                              out.data_ptr<float>(), srformer::kernels::HeadLayout::heads_outer(1, 2, 8), shape, 1),
               std::invalid_argument);
}

// Each output is the same fused multiply-add chain in either block, so the instruction set the CPU
// has does not change an encoder's output: tails of keys (70) and of the head dimension (40) included.
TEST(Fp32Attention, AvxTwoAndAvx512GiveTheSameBits) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  if (!avx512_available()) GTEST_SKIP() << "this CPU has no AVX-512F: only the AVX2 blocks run here";
  torch::manual_seed(11);
  for (const auto& [tq, t, d] : {std::tuple<int64_t, int64_t, int64_t>{7, 70, 40}, {33, 16, 64}, {1, 3, 8}}) {
    const auto q = torch::randn({2, 3, tq, d}), k = torch::randn({2, 3, t, d}), v = torch::randn({2, 3, t, d});
    const auto bias = torch::randn({1, 3, tq, t});
    set_avx512(true);
    const auto wide = srformer::attend_fp32_kernel(q, k, v, bias);
    set_avx512(false);
    const auto narrow = srformer::attend_fp32_kernel(q, k, v, bias);
    EXPECT_TRUE(torch::equal(wide, narrow)) << "tq=" << tq << " t=" << t << " d=" << d;
  }
}

// T5's encoder passes its position bias as diagonals (a function of key − query): the dense form has
// element (i, j) = diagonals[j − i + Tq − 1], and the kernels, reading the diagonals in place (row
// stride −1), give the same bits as with that dense bias; LibTorch's path (training) builds it.
TEST(Fp32Attention, ABiasGivenByItsDiagonalsEqualsItsDenseForm) {
  torch::manual_seed(5);
  const int64_t H = 3, Tq = 5, T = 7;
  const srformer::DiagonalBias diag{torch::randn({H, Tq + T - 1}), Tq};
  const auto dense = diag.dense();
  ASSERT_EQ(dense.sizes(), (torch::IntArrayRef{1, H, Tq, T}));
  for (int64_t h = 0; h < H; ++h) {
    for (int64_t i = 0; i < Tq; ++i) {
      for (int64_t j = 0; j < T; ++j) {
        ASSERT_EQ(dense[0][h][i][j].item<float>(), diag.diagonals[h][j - i + Tq - 1].item<float>());
      }
    }
  }
  SKIP_WITHOUT_FP32_ATTENTION();
  srformer::SelfAttention a;
  const int64_t D = 24, k = 19;
  for (auto* l : {&a.q, &a.k, &a.v, &a.o}) l->weight = torch::randn({D, D}) * 0.2;
  a.heads = H;
  const auto x = torch::randn({2, k, D});
  const srformer::DiagonalBias bias{torch::randn({H, 2 * k - 1}), k};
  auto mask = torch::zeros({2, 1, 1, k});
  mask[1].narrow(-1, 12, k - 12).fill_(-std::numeric_limits<float>::infinity());
  torch::NoGradGuard no_grad;
  const auto libtorch = a.forward(x, bias, mask);
  EXPECT_TRUE(torch::equal(libtorch, a.forward(x, bias.dense(), mask)));
  a.kernel_attention = true;
  const auto kernel = a.forward(x, bias, mask);
  EXPECT_TRUE(torch::equal(kernel, a.forward(x, bias.dense(), mask))) << "the same bias values, read in place";
  EXPECT_LT((kernel - libtorch).abs().max().item<double>(), 2e-6);
  if (srformer::kernels::cpu_bf16_available()) {
    a.bf16_attention = true;
    EXPECT_TRUE(torch::equal(a.forward(x, bias, mask), a.forward(x, bias.dense(), mask)));
  }
  EXPECT_THROW(a.forward(x, srformer::DiagonalBias{torch::randn({H, 2 * k}), k}, mask), std::invalid_argument);
}

// Encoder layers take the kernel (fp32, untracked); the decoder and training keep LibTorch's form.
TEST(Fp32Attention, EncoderLayersUseItAndTrainingDoesNot) {
  const srformer::testing::KernelSwitchesRestored restore_switches;
  SKIP_WITHOUT_CPU_KERNELS();
  SKIP_WITHOUT_FP32_ATTENTION();
  torch::manual_seed(3);
  srformer::SelfAttention a;
  const int64_t D = 32;
  for (auto* l : {&a.q, &a.k, &a.v, &a.o}) l->weight = torch::randn({D, D}) * 0.2;
  a.heads = 2;
  const auto x = torch::randn({2, 21, D});
  const auto bias = torch::randn({1, 2, 21, 21});
  torch::NoGradGuard no_grad;
  srformer::kernels::set_cpu_kernels(false);  // LibTorch's form throughout, the projections too
  const auto libtorch = a.forward(x, bias);
  srformer::kernels::set_cpu_kernels(true);
  a.kernel_attention = true;
  const auto kernel = a.forward(x, bias);
  EXPECT_FALSE(torch::equal(kernel, libtorch)) << "the kernel sums in its own order";
  // Rounding only: a few float ulps of the output (LibTorch's BLAS sums in its own CPU-dependent order too).
  EXPECT_LT((kernel - libtorch).abs().max().item<double>(), 1e-6 * (1.0 + libtorch.abs().max().item<double>()));
  {
    torch::AutoGradMode grad(true);  // training: autograd tracks the input, LibTorch's form runs
    const auto tracked = x.clone().requires_grad_(true);
    EXPECT_TRUE(torch::equal(a.forward(tracked, bias), libtorch));
  }
  srformer::kernels::set_cpu_kernels(false);
  EXPECT_TRUE(torch::equal(a.forward(x, bias), libtorch)) << "SRFORMER_CPU_KERNELS=0: LibTorch's form";
}
