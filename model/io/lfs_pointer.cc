#include "model/io/lfs_pointer.h"

#include <array>
#include <fstream>

namespace srformer {

namespace {

// The spec's first line (https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md), and the
// pre-release name it had.
constexpr std::array<std::string_view, 2> kVersionLines = {"version https://git-lfs.github.com/spec/",
                                                           "version https://hawser.github.com/spec/"};

// The value of the pointer's "size N" line, the real file's bytes; empty when absent.
std::string_view size_line(std::string_view text) {
  constexpr std::string_view key = "\nsize ";
  const auto at = text.find(key);
  if (at == std::string_view::npos) return {};
  const auto start = at + key.size();
  auto end = start;
  while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
  return text.substr(start, end - start);
}

}  // namespace

std::optional<std::string> lfs_pointer_message(const std::filesystem::path& file, std::string_view head) {
  bool pointer = false;
  for (const auto line : kVersionLines) pointer = pointer || head.substr(0, line.size()) == line;
  if (!pointer) return std::nullopt;
  const auto size = size_line(head);
  return file.string() + " is a Git LFS pointer, not the file itself" +
         (size.empty() ? std::string() : " (which has " + std::string(size) + " bytes)") +
         ": the model's repository was cloned without Git LFS. Fetch the real files with `git lfs install && "
         "git lfs pull` in that directory, or download them again (e.g. huggingface-cli download)";
}

std::optional<std::string> lfs_pointer_message(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::array<char, 1024> buffer{};
  in.read(buffer.data(), buffer.size());
  return lfs_pointer_message(file, std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
}

}  // namespace srformer
