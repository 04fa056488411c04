#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "model/train/adamw.h"
#include "tests/support/temp_dir.h"

namespace srformer::train {
namespace {

// One parameter element through two AdamW updates, written out with scalars from the paper's algorithm.
TEST(AdamW, TwoUpdatesFollowTheDecoupledWeightDecayAlgorithm) {
  auto w = torch::tensor({{0.5, -1.0}}, torch::kFloat64).requires_grad_(true);  // decays (a matrix)
  auto b = torch::tensor({2.0}, torch::kFloat64).requires_grad_(true);          // does not (a vector)
  AdamWOptions o;
  o.weight_decay = 0.1;
  AdamW opt({{"w", w}, {"b", b}}, o);
  const double grads[2][2] = {{0.3, -0.2}, {-0.1, 0.4}};  // step 1, step 2 gradients of w[0][0] and b[0]
  double pw = 0.5, pb = 2.0, mw = 0, vw = 0, mb = 0, vb = 0;
  const double lr = 0.01;
  for (int t = 1; t <= 2; ++t) {
    w.mutable_grad() = torch::tensor({{grads[t - 1][0], 0.0}}, torch::kFloat64);
    b.mutable_grad() = torch::tensor({grads[t - 1][1]}, torch::kFloat64);
    opt.step(lr);
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.999, t);
    pw *= 1 - lr * 0.1;
    mw = 0.9 * mw + 0.1 * grads[t - 1][0];
    vw = 0.999 * vw + 0.001 * grads[t - 1][0] * grads[t - 1][0];
    pw -= lr * (mw / bc1) / (std::sqrt(vw / bc2) + 1e-8);
    mb = 0.9 * mb + 0.1 * grads[t - 1][1];
    vb = 0.999 * vb + 0.001 * grads[t - 1][1] * grads[t - 1][1];
    pb -= lr * (mb / bc1) / (std::sqrt(vb / bc2) + 1e-8);
    EXPECT_NEAR(w[0][0].item<double>(), pw, 1e-12) << "step " << t;
    EXPECT_NEAR(b[0].item<double>(), pb, 1e-12) << "step " << t;
  }
  // A zero gradient with weight decay only shrinks the weight.
  EXPECT_NEAR(w[0][1].item<double>(), -1.0 * (1 - lr * 0.1) * (1 - lr * 0.1), 1e-12);
  EXPECT_EQ(opt.steps(), 2);
}

// Hugging Face's Trainer decays no parameter named like a bias: besides 1-D biases and norms, BART's
// final_logits_bias [1, V] and T5's relative_attention_bias tables are matrices that it leaves alone.
TEST(AdamW, NoWeightDecayForBiasesNormsAndScalarsWhateverTheirShape) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.encoder.layers.0.fc1.weight", {2, 3}},
      {"model.shared.weight", {4, 3}},
      {"final_logits_bias", {1, 4}},
      {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", {4, 2}},
      {"model.encoder.layers.0.fc1.bias", {2}},
      {"encoder.final_layer_norm.weight", {3}},
      {"decoder.block.0.layer.1.EncDecAttention.threshold", {1}}};
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (const auto& [name, shape] : shapes) {
    params.emplace_back(name, torch::ones(shape, torch::kFloat64).requires_grad_(true));
  }
  AdamWOptions o;
  o.weight_decay = 0.1;
  AdamW opt(params, o);
  // A zero gradient moves no weight through the moments: whatever changes was decayed.
  for (auto& [name, p] : params) p.mutable_grad() = torch::zeros_like(p);
  opt.step(0.5);
  for (const auto& [name, p] : params) {
    const bool decays = name == "model.encoder.layers.0.fc1.weight" || name == "model.shared.weight";
    EXPECT_TRUE(torch::allclose(p, torch::full_like(p, decays ? 1 - 0.5 * 0.1 : 1.0), 0, 1e-15)) << name;
  }
}

TEST(AdamW, StateRoundTripsThroughItsFileAndContinuesIdentically) {
  testing::TempDir dir("adamw");
  auto make = [] { return torch::arange(6, torch::kFloat32).view({2, 3}).requires_grad_(true); };
  auto p1 = make(), p2 = make();
  AdamW a({{"p", p1}}, {}), b({{"p", p2}}, {});
  p1.mutable_grad() = torch::full({2, 3}, 0.5f);
  a.step(0.1);
  a.save(dir.path() / "opt.safetensors");
  {
    torch::NoGradGuard g;
    p2.copy_(p1);
  }
  b.load(dir.path() / "opt.safetensors");
  EXPECT_EQ(b.steps(), 1);
  for (auto* p : {&p1, &p2}) p->mutable_grad() = torch::full({2, 3}, -0.25f);
  a.step(0.1);
  b.step(0.1);
  EXPECT_TRUE(torch::equal(p1, p2));

  auto other = torch::zeros({3}, torch::kFloat32).requires_grad_(true);
  AdamW c({{"q", other}}, {});
  EXPECT_THROW(c.load(dir.path() / "opt.safetensors"), std::runtime_error);
}

TEST(AdamW, RejectsParametersThatDoNotRequireGrad) {
  EXPECT_THROW(AdamW({{"x", torch::zeros({2})}}, {}), std::invalid_argument);
}

TEST(ClipGradNorm, ScalesToTheMaximumAndReportsTheNormBefore) {
  auto a = torch::zeros({2}).requires_grad_(true), b = torch::zeros({1}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 0.0f});
  b.mutable_grad() = torch::tensor({4.0f});
  const std::vector<std::pair<std::string, torch::Tensor>> params = {{"a", a}, {"b", b}};
  EXPECT_NEAR(clip_grad_norm(params, 10.0), 5.0, 1e-6);
  EXPECT_FLOAT_EQ(b.grad()[0].item<float>(), 4.0f);  // under the maximum: untouched
  EXPECT_NEAR(clip_grad_norm(params, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(a.grad()[0].item<float>(), 0.6f, 1e-5);
  EXPECT_NEAR(b.grad()[0].item<float>(), 0.8f, 1e-5);
}

TEST(LinearSchedule, WarmsUpThenDecaysToZero) {
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 0, 4, 10), 0.25);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 3, 4, 10), 1.0);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 4, 4, 10), 1.0);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 7, 4, 10), 0.5);
  EXPECT_DOUBLE_EQ(linear_schedule(1.0, 10, 4, 10), 0.0);
  EXPECT_DOUBLE_EQ(linear_schedule(2.0, 0, 0, 4), 2.0);  // no warm-up
}

}  // namespace
}  // namespace srformer::train
