#include "model/io/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace srformer {
namespace {

[[noreturn]] void io_failure(const std::filesystem::path& path, const std::string& what) {
  throw std::runtime_error("cannot write " + path.string() + ": " + what + ": " + std::strerror(errno));
}

// The temporary files of writes to `target` whose process has ended without renaming or removing them
// (killed: Ctrl-C, the OOM killer), each up to a model's size; they were left for good. A process still
// running (kill(pid, 0) does not say ESRCH) keeps its file.
void remove_abandoned_temporaries(const std::filesystem::path& target) {
  const std::string prefix = target.filename().string() + ".tmp.";
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(target.parent_path().empty() ? "." : target.parent_path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());  // PID.N
    const auto dot = rest.find('.');
    // pids have at most 7 digits (pid_max <= 2^22): a longer number is no temporary of ours (nor fits stoll).
    if (dot == 0 || dot > 9 || dot == std::string::npos ||
        !std::all_of(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(dot),
                     [](unsigned char c) { return std::isdigit(c) != 0; })) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stoll(rest.substr(0, dot)));
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) std::filesystem::remove(entry.path(), ec);
  }
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  remove_abandoned_temporaries(target_);
  static std::atomic<unsigned> counter{0};
  tmp_ = target_;
  tmp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) io_failure(tmp_, "cannot create");
  // The permissions of the file replaced (through a symlink: of the file read by that name), as editors and
  // install(1) keep them: a config.json made group-writable or private stays so. Set-id bits are not kept.
  struct stat old {};
  if (::stat(target_.c_str(), &old) == 0 && S_ISREG(old.st_mode) && ::fchmod(fd_, old.st_mode & 0777) != 0) {
    io_failure(tmp_, "cannot set the mode of");
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) io_failure(tmp_, "write failed");
    bytes += n;
    size -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) io_failure(tmp_, "fsync failed");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) io_failure(tmp_, "close failed");
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) io_failure(target_, "rename from " + tmp_.string() + " failed");
  committed_ = true;
  // The rename is on the disk only once the directory is: without this, power lost after commit() could
  // bring back the old file (or none) under a name every caller took for written.
  sync_path(target_.parent_path().empty() ? std::filesystem::path(".") : target_.parent_path());
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  AtomicFile out(path);
  out.write(bytes.data(), bytes.size());
  out.commit();
}

void copy_file_atomically(const std::filesystem::path& from, const std::filesystem::path& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw std::runtime_error("cannot open " + from.string() + ": " + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } const closer{in};
  AtomicFile out(to);
  std::vector<char> buffer(1 << 20);
  for (;;) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error("cannot read " + from.string() + ": " + std::strerror(errno));
    if (n == 0) break;
    out.write(buffer.data(), static_cast<size_t>(n));
  }
  out.commit();
}

void sync_path(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path.string() + " to sync it: " + std::strerror(errno));
  const bool synced = ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  // A file system that cannot sync (some FUSE and network ones, for directories) has nothing to wait for.
  if (!synced && error != EINVAL && error != ENOTSUP && error != ENOSYS) {
    throw std::runtime_error("cannot sync " + path.string() + ": " + std::strerror(error));
  }
}

}  // namespace srformer
