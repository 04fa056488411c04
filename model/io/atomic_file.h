#pragma once
// Writing a file so that it is whole or absent: into a temporary file beside it, synced, then renamed over
// it. A write that fails (a full disk, a file size limit) throws instead of leaving a file cut short that
// the next reader takes for the real one.
#include <filesystem>
#include <string_view>

namespace srformer {

// A temporary file next to `target`, removed unless commit() synced and renamed it into place, and synced
// the directory (the rename itself survives a power loss once commit() returns). Temporaries of processes
// that ended without either (killed) are removed when the next one for `target` opens.
// The new file keeps the permissions of the one it replaces (0644 less the umask for a new one).
// A `target` that is a symlink is replaced by a regular file and its link target left as it was: a model
// saved over a Hugging Face cache snapshot (config.json -> ../../blobs/<hash>) must not rewrite a
// content-addressed blob that other snapshots may share and whose name no longer matches its content.
// Throws std::runtime_error naming the file and the system's reason for any I/O failure.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void commit();

 private:
  std::filesystem::path target_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// Replaces `path` with `bytes` through an AtomicFile.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);

// Replaces `to` with a copy of `from` through an AtomicFile: a reader of `to` sees the old file or the whole
// copy, never a part (std::filesystem::copy_file truncates and writes in place, and writes through a symlink).
void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to);

// fsync()s `path` (a file or a directory): what a rename or a copy put there reaches the disk before
// anything that relies on it. Throws std::runtime_error when it cannot.
void sync_path(const std::filesystem::path& path);

}  // namespace srformer
