// srformer::linear takes a matrix-vector path for one row on the CPU; it must agree with the
// plain matrix product (computed here element by element in double) for every shape it sees.
#include "model/layers.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "model/config.h"

namespace {

torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
  auto y = torch::matmul(x.to(torch::kFloat64), w.to(torch::kFloat64).t());
  if (b.defined()) y = y + b.to(torch::kFloat64);
  return y;
}

TEST(Linear, OneRowMatchesMatrixProductInEveryShape) {
  torch::manual_seed(3);
  const auto w = torch::randn({37, 19});
  const auto b = torch::randn({37});
  for (const auto& shape : std::vector<std::vector<int64_t>>{{19}, {1, 19}, {1, 1, 19}, {1, 1, 1, 19}}) {
    const auto x = torch::randn(shape);
    for (const bool with_bias : {false, true}) {
      const auto bias = with_bias ? b : torch::Tensor();
      const auto y = srformer::linear(x, w, bias);
      auto expected_shape = shape;
      expected_shape.back() = 37;
      EXPECT_EQ(y.sizes().vec(), expected_shape);
      EXPECT_TRUE(torch::allclose(y.to(torch::kFloat64), reference(x, w, bias), 1e-5, 1e-5));
    }
  }
}

TEST(Linear, ManyRowsAndNonContiguousInput) {
  torch::manual_seed(4);
  const auto w = torch::randn({11, 8});
  const auto b = torch::randn({11});
  const auto x = torch::randn({3, 5, 8});
  EXPECT_TRUE(torch::allclose(srformer::linear(x, w, b).to(torch::kFloat64), reference(x, w, b), 1e-5, 1e-5));
  // One row picked out of a larger tensor with a stride: the matrix-vector path must not read past it.
  const auto wide = torch::randn({8, 4});
  const auto col = wide.slice(1, 2, 3).t();  // [1, 8], stride 4
  ASSERT_FALSE(col.is_contiguous());
  EXPECT_TRUE(torch::allclose(srformer::linear(col, w, b).to(torch::kFloat64), reference(col, w, b), 1e-5, 1e-5));
}

// The pieces of a pausable pass: blocks in order, covering everything once, a pause between each two.
TEST(ConcatBlocks, BlocksInOrderWithAPauseBetweenEachTwo) {
  const auto whole = torch::arange(2 * 10 * 3, torch::kFloat32).view({2, 10, 3});
  std::vector<std::pair<int64_t, int64_t>> blocks;
  int pauses = 0;
  const auto out = srformer::concat_blocks(
      10, 4, 1, [&] { ++pauses; },
      [&](int64_t first, int64_t n) {
        blocks.emplace_back(first, n);
        return whole.narrow(1, first, n) * 1;
      });
  EXPECT_EQ(blocks, (std::vector<std::pair<int64_t, int64_t>>{{0, 4}, {4, 4}, {8, 2}}));
  EXPECT_EQ(pauses, 2);
  EXPECT_TRUE(torch::equal(out, whole));
  // One block covering all; no pause, and no `between` needed.
  EXPECT_TRUE(torch::equal(srformer::concat_blocks(10, 64, 1, {}, [&](int64_t, int64_t) { return whole * 1; }), whole));
  EXPECT_THROW(srformer::concat_blocks(10, 0, 1, {}, [&](int64_t, int64_t) { return whole; }), std::invalid_argument);
}

// A projection by blocks of positions is the whole projection, heads contiguous.
TEST(ProjectHeads, ByBlocksEqualsWholeAndIsContiguous) {
  torch::manual_seed(5);
  srformer::Linear proj;
  proj.weight = torch::randn({12, 8});
  const auto x = torch::randn({2, 9, 8});
  const auto whole = srformer::split_heads(proj(x), 3);
  int pauses = 0;
  const auto blocks = srformer::project_heads(proj, x, 3, 4, [&] { ++pauses; });
  EXPECT_EQ(pauses, 2);
  EXPECT_TRUE(blocks.is_contiguous());
  EXPECT_EQ(blocks.sizes(), whole.sizes());
  EXPECT_TRUE(torch::allclose(blocks, whole, 1e-5, 1e-5));
  EXPECT_TRUE(srformer::project_heads(proj, x, 3).is_contiguous());
}

}  // namespace

// Hugging Face's fp16 guard: nothing changes while every element is finite; one infinite element
// anywhere clamps all of them to ±(65504 − 1000). Other dtypes pass through untouched.
TEST(ClampFp16Overflow, ClampsEverythingOnlyWhereSomethingOverflowed) {
  const auto finite = torch::tensor({1.5, -65504.0, 65000.0, 0.0}).to(torch::kFloat16);
  EXPECT_TRUE(torch::equal(srformer::clamp_fp16_overflow(finite), finite));
  const auto inf = std::numeric_limits<double>::infinity();
  const auto overflowed = torch::tensor({1.5, -inf, 65000.0, inf}).to(torch::kFloat16);
  const auto clamped = srformer::clamp_fp16_overflow(overflowed);
  EXPECT_EQ(clamped.scalar_type(), torch::kFloat16);
  // 64504 as fp16 holds it (64512: fp16 steps by 32 there).
  EXPECT_TRUE(torch::equal(clamped, torch::tensor({1.5, -64504.0, 64504.0, 64504.0}).to(torch::kFloat16))) << clamped;
  const auto fp32 = torch::tensor({1.0F, std::numeric_limits<float>::infinity()});
  EXPECT_TRUE(torch::equal(srformer::clamp_fp16_overflow(fp32), fp32)) << "fp32 has the range: left alone";
}

// Each activation a config may name against Hugging Face's formula (activations.py, torch.nn), in double.
TEST(Activation, EveryConfigNameComputesHuggingFacesFunction) {
  const auto gelu = [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); };
  const auto gelu_tanh = [](double x) {
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::acos(-1.0)) * (x + 0.044715 * x * x * x)));
  };
  const auto sigmoid = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
  const std::vector<std::pair<const char*, std::function<double(double)>>> want = {
      {"relu", [](double x) { return x > 0 ? x : 0.0; }},
      {"gelu", gelu},
      {"gelu_python", gelu},
      {"gelu_new", gelu_tanh},
      {"gelu_pytorch_tanh", gelu_tanh},
      {"gelu_fast", [](double x) { return 0.5 * x * (1.0 + std::tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x))); }},
      {"quick_gelu", [&](double x) { return x * sigmoid(1.702 * x); }},
      {"silu", [&](double x) { return x * sigmoid(x); }},
      {"swish", [&](double x) { return x * sigmoid(x); }},
  };
  ASSERT_EQ(want.size(), std::size(srformer::kActivations)) << "a config name without a formula here";
  const std::vector<double> xs = {-4.0, -1.5, -0.5, -1e-3, 0.0, 0.25, 1.0, 2.5, 6.0};
  const auto x = torch::tensor(xs, torch::kFloat64);
  for (const auto& [name, f] : want) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(srformer::is_supported_activation(name));
    const auto y = srformer::activate(x, srformer::activation_from_string(name));
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_NEAR(y[static_cast<int64_t>(i)].item<double>(), f(xs[i]), 1e-9);
  }
  // The exact GELU and its tanh approximation differ by ~1.5e-4 at 1: a mix-up shows above.
  EXPECT_GT(std::abs(gelu(1.0) - gelu_tanh(1.0)), 1e-4);
  EXPECT_THROW(srformer::activation_from_string("mish"), std::invalid_argument);
}

// T5's gated feed-forward (T5DenseGatedActDense): wo(act(wi_0 x) * wi_1 x), by hand on 2x2 weights.
TEST(FeedForward, GatedMultipliesTheActivatedProjectionByTheLinearOne) {
  srformer::FeedForward f;
  f.in.weight = torch::tensor({1.0, -2.0, 0.5, 3.0}, torch::kFloat64).view({2, 2});     // wi_0
  f.gate.weight = torch::tensor({2.0, 1.0, -1.0, 0.25}, torch::kFloat64).view({2, 2});  // wi_1
  f.out.weight = torch::tensor({1.0, 1.0, 0.0, -2.0}, torch::kFloat64).view({2, 2});    // wo
  f.act = srformer::Activation::kSilu;
  const auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  const double x0 = 0.7, x1 = -0.3;
  const double h0 = silu(1.0 * x0 - 2.0 * x1) * (2.0 * x0 + 1.0 * x1);
  const double h1 = silu(0.5 * x0 + 3.0 * x1) * (-1.0 * x0 + 0.25 * x1);
  const auto y = f(torch::tensor({x0, x1}, torch::kFloat64).view({1, 1, 2}));
  EXPECT_NEAR(y[0][0][0].item<double>(), h0 + h1, 1e-12);
  EXPECT_NEAR(y[0][0][1].item<double>(), -2.0 * h1, 1e-12);
}
