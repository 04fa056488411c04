#pragma once
// AdamW (decoupled weight decay, bias-corrected moments: Loshchilov & Hutter; the update of
// torch.optim.AdamW) over named parameters, with its state saved and restored exactly so that a
// resumed run continues bit for bit.
#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace srformer::train {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  // Applied to matrices whose name holds no "bias" (Hugging Face Trainer's groups): not to biases
  // (final_logits_bias, T5's relative_attention_bias included), norms or RAF threshold/leak.
  double weight_decay = 0.01;
};

class AdamW {
 public:
  // `params` must be floating-point leaves that require grad; their .grad() feeds step().
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> params, AdamWOptions options);

  // One update with learning rate `lr`; parameters without a gradient are left alone.
  void step(double lr);
  void zero_grad();
  int64_t steps() const { return steps_; }

  // optimizer.safetensors: "exp_avg.NAME" / "exp_avg_sq.NAME" per parameter, the step in the metadata.
  void save(const std::filesystem::path& file) const;
  // Throws std::runtime_error when the file does not hold exactly this optimizer's parameters and shapes.
  void load(const std::filesystem::path& file);

 private:
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool decay = false;
  };
  std::vector<Slot> slots_;
  AdamWOptions options_;
  int64_t steps_ = 0;
};

// Scales every gradient so their global L2 norm is at most max_norm (> 0); returns the norm before
// clipping (torch.nn.utils.clip_grad_norm_).
double clip_grad_norm(const std::vector<std::pair<std::string, torch::Tensor>>& params, double max_norm);

// Linear warm-up to peak over `warmup` steps, then linear decay to 0 at `total` (HF's
// get_linear_schedule_with_warmup, except that the first update gets peak/warmup instead of 0).
// `step` counts from 0 (the first update).
double linear_schedule(double peak, int64_t step, int64_t warmup, int64_t total);

}  // namespace srformer::train
