#include "model/train/loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

namespace srformer::train {
namespace {

double log_softmax_at(const std::vector<double>& row, size_t i) {
  double z = 0;
  for (const double x : row) z += std::exp(x);
  return row[i] - std::log(z);
}

TEST(TokenCrossEntropy, SumsNegativeLogLikelihoodOverRealLabelsOnly) {
  const std::vector<std::vector<double>> rows = {{1.0, 2.0, 0.5}, {0.0, -1.0, 3.0}, {2.0, 2.0, 2.0}};
  const auto logits = torch::tensor({1.0, 2.0, 0.5, 0.0, -1.0, 3.0, 2.0, 2.0, 2.0}).view({1, 3, 3});
  const auto labels = torch::tensor({int64_t{1}, int64_t{2}, kIgnoreLabel}, torch::kLong).view({1, 3});
  const auto t = token_cross_entropy(logits, labels);
  const double want = -log_softmax_at(rows[0], 1) - log_softmax_at(rows[1], 2);
  EXPECT_EQ(t.tokens, 2);
  EXPECT_NEAR(t.nll_sum, want, 1e-5);
  EXPECT_NEAR(t.loss_sum.item<double>(), want, 1e-5);
}

TEST(TokenCrossEntropy, LabelSmoothingMixesInTheMeanOverClasses) {
  const std::vector<double> row = {1.0, 2.0, 0.5};
  const auto logits = torch::tensor(row).view({1, 1, 3});
  const auto labels = torch::tensor({0}, torch::kLong).view({1, 1});
  const double e = 0.1;
  double uniform = 0;
  for (size_t i = 0; i < 3; ++i) uniform -= log_softmax_at(row, i) / 3;
  const auto t = token_cross_entropy(logits, labels, e);
  EXPECT_NEAR(t.loss_sum.item<double>(), (1 - e) * -log_softmax_at(row, 0) + e * uniform, 1e-5);
  EXPECT_NEAR(t.nll_sum, -log_softmax_at(row, 0), 1e-5);  // reported unsmoothed
}

TEST(TokenCrossEntropy, ClassesBeyondTheTokenizerTakeNoPart) {
  const auto logits = torch::tensor({1.0, 2.0, 50.0}).view({1, 1, 3});
  const auto labels = torch::tensor({1}, torch::kLong).view({1, 1});
  const auto t = token_cross_entropy(logits, labels, 0.0, 2);
  EXPECT_NEAR(t.nll_sum, -log_softmax_at({1.0, 2.0}, 1), 1e-5);
  EXPECT_THROW(token_cross_entropy(logits, torch::tensor({2}, torch::kLong).view({1, 1}), 0.0, 2),
               std::invalid_argument);
}

TEST(TokenCrossEntropy, GradientIsSoftmaxMinusOneHot) {
  auto logits = torch::tensor({0.2, -0.4, 1.0}).view({1, 1, 3}).requires_grad_(true);
  const auto labels = torch::tensor({2}, torch::kLong).view({1, 1});
  token_cross_entropy(logits, labels).loss_sum.backward();
  const auto p = torch::softmax(logits.detach().view({3}), 0);
  auto want = p.clone();
  want[2] -= 1.0;
  EXPECT_TRUE(torch::allclose(logits.grad().view({3}), want, 1e-6, 1e-6));
}

TEST(TokenCrossEntropy, RejectsBadShapesAndSmoothing) {
  EXPECT_THROW(token_cross_entropy(torch::zeros({2, 3}), torch::zeros({2}, torch::kLong)), std::invalid_argument);
  EXPECT_THROW(token_cross_entropy(torch::zeros({1, 1, 3}), torch::zeros({1, 1}, torch::kLong), 1.0),
               std::invalid_argument);
}

}  // namespace
}  // namespace srformer::train
