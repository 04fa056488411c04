#pragma once
// Dynamic loss scaling for fp16 mixed-precision training (the rule of torch.cuda.amp.GradScaler).
// fp16 gradients of small losses flush to zero, so the loss is multiplied by `scale()` before the
// backward pass and the gradients divided back before clipping; an update whose gradients came out
// infinite or NaN is skipped and the scale halved, and after `growth_interval` good updates in a row
// the scale doubles. bf16 has fp32's exponent range and needs none of this (a disabled scaler is 1).
#include <cstdint>

namespace srformer::train {

class LossScaler {
 public:
  static constexpr double kInitialScale = 65536.0;
  static constexpr int64_t kGrowthInterval = 2000;

  explicit LossScaler(bool enabled, double scale = kInitialScale, int64_t good_updates = 0,
                      int64_t growth_interval = kGrowthInterval);

  bool enabled() const { return enabled_; }
  double scale() const { return enabled_ ? scale_ : 1.0; }
  int64_t good_updates() const { return good_updates_; }  // since the last change of the scale

  // Records whether the update's gradients were finite; returns whether to apply the update. A
  // disabled scaler applies every update (fp32 and bf16 training keep their old behaviour).
  bool update(bool gradients_finite);

 private:
  bool enabled_;
  double scale_;
  int64_t good_updates_;
  int64_t growth_interval_;
};

}  // namespace srformer::train
