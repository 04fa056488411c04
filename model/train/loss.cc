#include "model/train/loss.h"

#include <torch/torch.h>

#include <stdexcept>

namespace srformer::train {

LossTerms token_cross_entropy(const torch::Tensor& logits, const torch::Tensor& labels, double label_smoothing,
                              int64_t classes) {
  if (logits.dim() != 3 || labels.dim() != 2 || logits.size(0) != labels.size(0) || logits.size(1) != labels.size(1)) {
    throw std::invalid_argument("token_cross_entropy: logits must be [B,q,V] and labels [B,q]");
  }
  if (label_smoothing < 0.0 || label_smoothing >= 1.0) {
    throw std::invalid_argument("label smoothing must be in [0, 1)");
  }
  const int64_t V = logits.size(2);
  const int64_t C = classes > 0 ? std::min(classes, V) : V;
  const auto real = labels.ne(kIgnoreLabel);
  if (real.any().item<bool>() && labels.masked_select(real).max().item<int64_t>() >= C) {
    throw std::invalid_argument("token_cross_entropy: a label is outside the " + std::to_string(C) + " classes");
  }
  const auto logp = torch::log_softmax(logits.narrow(2, 0, C).to(torch::kFloat32), -1);
  const auto safe = labels.clamp_min(0).unsqueeze(-1);
  const auto nll = -logp.gather(-1, safe).squeeze(-1);
  const auto weight = real.to(torch::kFloat32);
  LossTerms out;
  const auto nll_sum = (nll * weight).sum();
  out.nll_sum = nll_sum.item<double>();
  out.tokens = real.sum().item<int64_t>();
  if (label_smoothing == 0.0) {
    out.loss_sum = nll_sum;
  } else {
    const auto smooth = -logp.mean(-1);
    out.loss_sum = ((1.0 - label_smoothing) * nll + label_smoothing * smooth).mul(weight).sum();
  }
  return out;
}

}  // namespace srformer::train
