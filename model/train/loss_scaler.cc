#include "model/train/loss_scaler.h"

#include <stdexcept>

namespace srformer::train {

LossScaler::LossScaler(bool enabled, double scale, int64_t good_updates, int64_t growth_interval)
    : enabled_(enabled), scale_(scale), good_updates_(good_updates), growth_interval_(growth_interval) {
  if (!(scale > 0) || good_updates < 0 || growth_interval < 1) {
    throw std::invalid_argument("loss scaler: the scale must be > 0, good updates >= 0, growth interval >= 1");
  }
}

bool LossScaler::update(bool gradients_finite) {
  if (!enabled_) return true;
  if (!gradients_finite) {
    scale_ *= 0.5;
    good_updates_ = 0;
    return false;
  }
  if (++good_updates_ == growth_interval_) {
    scale_ *= 2.0;
    good_updates_ = 0;
  }
  return true;
}

}  // namespace srformer::train
