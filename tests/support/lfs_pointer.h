#pragma once
// What a repository cloned without Git LFS holds in place of a large file, and the check that a load
// error reports it as such: shared by the weight and tokenizer loaders' tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace srformer::testing {

// A Git LFS pointer (spec v1) standing for a file of `size` bytes.
inline std::string lfs_pointer_text(int64_t size) {
  return "version https://git-lfs.github.com/spec/v1\n"
         "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
         "size " +
         std::to_string(size) + "\n";
}

// `message` names `file` as a pointer, the real file's size and the fix.
inline void expect_lfs_pointer_message(const std::string& message, const std::string& file, int64_t size) {
  EXPECT_NE(message.find(file + " is a Git LFS pointer"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(size) + " bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("git lfs pull"), std::string::npos) << message;
}

}  // namespace srformer::testing
