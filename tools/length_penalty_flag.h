#pragma once
// A --length-penalty flag's value, checked as the server checks a request's: validate() checks the length
// penalty only with beams, where a checkpoint's matters; a flag's is refused whatever the beams.
#include <cmath>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "model/generation/options.h"

namespace srformer::tools {

inline void check_length_penalty_flag(const std::optional<double>& length_penalty) {
  if (length_penalty && !(std::abs(*length_penalty) <= kMaxLengthPenalty)) {
    std::ostringstream given;
    given << *length_penalty;
    throw std::invalid_argument("--length-penalty must be between -10 and 10, got " + given.str());
  }
}

}  // namespace srformer::tools
