#pragma once
// The one exception type of the weights I/O layer: a file or directory that cannot be loaded as asked.
#include <stdexcept>

namespace srformer {

class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace srformer
