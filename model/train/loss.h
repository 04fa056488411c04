#pragma once
// Token-level cross-entropy for teacher-forced training, with optional label smoothing.
#include <torch/types.h>

#include <cstdint>

namespace srformer::train {

inline constexpr int64_t kIgnoreLabel = -100;  // label of padding positions (as in Hugging Face)

struct LossTerms {
  torch::Tensor loss_sum;  // scalar, differentiable: the (smoothed) loss summed over real tokens
  double nll_sum = 0.0;    // unsmoothed negative log-likelihood summed over real tokens (for reporting)
  int64_t tokens = 0;      // real (non-ignored) label positions
};

// logits [B,q,V] float, labels [B,q] int64 (kIgnoreLabel = padding). Only the first `classes` logits
// take part (the tokenizer's vocabulary; 0 = all V): embedding rows past it stand for no text.
// With smoothing e: (1-e)*nll + e*mean over classes of -log p (Hugging Face's LabelSmoother).
LossTerms token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double label_smoothing = 0.0,
                              int64_t classes = 0);

}  // namespace srformer::train
