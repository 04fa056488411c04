#include "model/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "model/io/load_error.h"

namespace srformer {
namespace {

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

[[noreturn]] void fail(const std::filesystem::path& path, const std::string& what) {
  throw LoadError(path.string() + ": " + what + ": " + std::strerror(errno));
}

}  // namespace

MappedFile::MappedFile(const std::filesystem::path& path) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever; fstat below refuses it.
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) fail(path, "cannot open");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat");
  if (!S_ISREG(st.st_mode)) throw LoadError(path.string() + ": not a regular file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap refuses empty mappings; callers see size() == 0
  void* const addr = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) fail(path, "cannot mmap " + std::to_string(size_) + " bytes");
  data_ = static_cast<std::byte*>(addr);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace srformer
