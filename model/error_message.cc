#include "model/error_message.h"

#include <c10/util/Exception.h>

#include <filesystem>

namespace srformer {

std::string error_message(const std::exception& e) {
  // libstdc++ says "filesystem error: status: Permission denied [/models/t5/config.json]".
  if (const auto* fs_error = dynamic_cast<const std::filesystem::filesystem_error*>(&e)) {
    // A call about no path of ours (temp_directory_path: TMPDIR not a directory) keeps its own words; it was
    // "cannot access : No such file or directory".
    if (fs_error->path1().empty()) return e.what();
    std::string message = "cannot access " + fs_error->path1().string() + ": " + fs_error->code().message();
    if (fs_error->code() == std::errc::permission_denied) {
      message +=
          " (the user running this needs read permission on it and search (x) permission on every "
          "directory above it)";
    }
    return message;
  }
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  if (torch_error == nullptr) return e.what();
  std::string message = torch_error->what_without_backtrace();
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return message;
}

}  // namespace srformer
