#include "model/dropout.h"

#include <torch/torch.h>

namespace srformer {

namespace {

thread_local const DropoutRates* active_rates = nullptr;

double rate_at(DropoutSite site) {
  if (active_rates == nullptr) return 0.0;
  switch (site) {
    case DropoutSite::kHidden:
      return active_rates->hidden;
    case DropoutSite::kAttention:
      return active_rates->attention;
    case DropoutSite::kActivation:
      return active_rates->activation;
  }
  return 0.0;
}

}  // namespace

DropoutScope::DropoutScope(const DropoutRates& rates) : previous_(active_rates), rates_(rates) {
  active_rates = &rates_;
}

DropoutScope::~DropoutScope() { active_rates = previous_; }

torch::Tensor dropout(const torch::Tensor& x, DropoutSite site) {
  const double p = rate_at(site);
  return p > 0.0 ? torch::dropout(x, p, /*train=*/true) : x;
}

bool dropout_active(DropoutSite site) { return rate_at(site) > 0.0; }

}  // namespace srformer
