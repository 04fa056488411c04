// A stand-in for a library that carries its own copy of part of libstdc++'s std::filesystem and exports
// it, as PyTorch's wheels do (pytorch/pytorch#133437). Any call bound to this copy aborts, loudly.
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace std::filesystem {
inline namespace __cxx11 {
recursive_directory_iterator::recursive_directory_iterator(const path&, directory_options, error_code*) {
  std::fputs("filesystem_copy: a call bound to the stand-in copy of recursive_directory_iterator\n", stderr);
  std::abort();
}
}  // namespace __cxx11
}  // namespace std::filesystem
