#pragma once
// A whole file mapped into memory, unmapped when the last owner lets go.
#include <cstddef>
#include <filesystem>

namespace srformer {

class MappedFile {
 public:
  // Maps `path` copy-on-write: the file is opened read-only and never changes, while in-place writes to
  // tensors viewing the mapping touch private pages instead of crashing. Throws LoadError.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace srformer
