#pragma once
// The exception type of the tokenizer layer: a tokenizer directory or file that cannot be loaded.
#include <stdexcept>

namespace srformer {

class TokenizerLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tokenizer file that ends before its format does (a download or copy broken off). Its message says
// what is missing, not what to do: load_tokenizer, which loads a user's model, adds the advice to download
// it again; srformer init-model, checking the file it has just written, says so instead.
class TokenizerFileCutShortError : public TokenizerLoadError {
 public:
  using TokenizerLoadError::TokenizerLoadError;
};

}  // namespace srformer
