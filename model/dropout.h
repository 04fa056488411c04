#pragma once
// Dropout for training, where Hugging Face's BART and T5 apply it: on the embeddings, on each
// sublayer's output before the residual sum, inside the feed-forward after the activation, and on the
// attention probabilities. Inference never drops: `dropout()` is the identity unless a DropoutScope is
// open in this thread (the trainer opens one around each training forward), so no inference path
// carries a training flag.
#include <torch/types.h>

#include "model/config.h"

namespace srformer {

enum class DropoutSite {
  kHidden,      // embeddings, sublayer outputs, T5's final norm (BART `dropout`, T5 `dropout_rate`)
  kAttention,   // attention probabilities (BART `attention_dropout`, T5 `dropout_rate`)
  kActivation,  // feed-forward hidden after the activation (BART `activation_dropout`, T5 `dropout_rate`)
};

class DropoutScope {
 public:
  explicit DropoutScope(const DropoutRates& rates);
  ~DropoutScope();
  DropoutScope(const DropoutScope&) = delete;
  DropoutScope& operator=(const DropoutScope&) = delete;

 private:
  const DropoutRates* previous_;
  DropoutRates rates_;
};

// x with elements zeroed at the site's rate and the rest scaled by 1/(1-rate) (LibTorch's generator),
// inside a DropoutScope; x itself otherwise.
torch::Tensor dropout(const torch::Tensor& x, DropoutSite site);

// Whether a scope drops anything at `site` in this thread (the CPU attention kernels have no dropout,
// so attention takes LibTorch's form while one does).
bool dropout_active(DropoutSite site);

}  // namespace srformer
