#pragma once
// An --expected-length flag's value (SRformer's L), checked as the server checks a request's: between 1
// and the bound it serves (max_expected_length) with generation's own cap on new tokens.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "model/config.h"
#include "model/generation/generate.h"
#include "model/generation/options.h"

namespace srformer::tools {

inline void check_expected_length_flag(const ModelConfig& c, int64_t expected) {
  const int64_t max_l = max_expected_length(c, kMaxNewTokensLimit);
  if (expected < 1 || expected > max_l) {
    const int64_t model_l = c.srformer.expected_length.value_or(0);
    throw std::invalid_argument("--expected-length must be between 1 and " + std::to_string(max_l) + ", got " +
                                std::to_string(expected) + "; leave it out for " +
                                (model_l > 0 ? "the model's " + std::to_string(model_l) : "--max-new-tokens"));
  }
}

}  // namespace srformer::tools
