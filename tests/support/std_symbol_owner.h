#pragma once
// Which loaded library the dynamic loader binds a symbol to, by the same search as an unresolved call
// (the global scope, in load order): dlsym(RTLD_DEFAULT) then dladdr.
#include <dlfcn.h>

#include <string>

namespace srformer::testing {

// recursive_directory_iterator(const path&, directory_options, error_code*), C++11 string ABI: what
// std::filesystem::remove_all constructs inside libstdc++, and what PyTorch's wheels export a copy of.
inline constexpr const char* kRecursiveDirectoryIteratorCtor =
    "_ZNSt10filesystem7__cxx1128recursive_directory_iteratorC1ERKNS0_4pathENS_17directory_optionsEPSt10error_code";

// The file name of the library whose definition of `symbol` calls bind to; "" when none defines it.
inline std::string symbol_owner(const char* symbol) {
  void* const address = ::dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || ::dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

}  // namespace srformer::testing
