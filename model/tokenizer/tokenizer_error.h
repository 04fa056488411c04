#pragma once
// The exception type of the tokenizer layer: a tokenizer directory or file that cannot be loaded.
#include <stdexcept>

namespace srformer {

class TokenizerLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace srformer
