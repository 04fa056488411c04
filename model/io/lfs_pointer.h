#pragma once
// A repository cloned without Git LFS holds, in place of each large file (weights, spiece.model, a big
// tokenizer.json), a ~130-byte text "pointer" naming the real file's hash and size: the usual way a
// Hugging Face checkout goes wrong. Loaders ask here before reporting a parse error, so that the
// message says what happened and how to fix it.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace srformer {

// What to tell the user when `head` (the file's first bytes; 1 KiB is plenty) is a Git LFS pointer;
// nullopt when it is not one.
std::optional<std::string> lfs_pointer_message(const std::filesystem::path& file, std::string_view head);

// The same for a file on disk (reads its first KiB; nullopt where it cannot be read).
std::optional<std::string> lfs_pointer_message(const std::filesystem::path& file);

}  // namespace srformer
