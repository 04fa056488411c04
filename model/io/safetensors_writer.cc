// save_safetensors: the writing half of model/io/safetensors.h.
#include <fcntl.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "model/io/safetensors.h"
#include "model/io/safetensors_dtype.h"

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

// A temporary file next to the target, removed unless commit() renamed it into place.
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
    remove_abandoned_temporaries(target_);
    static std::atomic<unsigned> counter{0};
    tmp_ = target_;
    tmp_ += ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) io_failure(tmp_, "cannot create");
  }
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size) {
    const auto* bytes = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd_, bytes, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) io_failure(tmp_, "write failed");
      bytes += n;
      size -= static_cast<size_t>(n);
    }
  }

  void commit() {
    if (::fsync(fd_) != 0) io_failure(tmp_, "fsync failed");
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) io_failure(tmp_, "close failed");
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) io_failure(target_, "rename from " + tmp_.string() + " failed");
    committed_ = true;
  }

 private:
  std::filesystem::path target_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

struct Prepared {
  std::string name;
  SafetensorsDtype dtype;
  torch::Tensor cpu;  // contiguous CPU copy (or the tensor itself when it already is one)
};

}  // namespace

void save_safetensors(const std::filesystem::path& path,
                      const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<Prepared> prepared;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): invalid tensor name '" + name + "'");
    }
    if (!seen.insert(name).second) {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): duplicate tensor name '" + name + "'");
    }
    if (!tensor.defined() || tensor.layout() != torch::kStrided) {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): tensor '" + name +
                                  "' is undefined or not dense");
    }
    const auto dtype = safetensors_dtype(tensor.scalar_type());
    if (!dtype) {
      throw std::invalid_argument("save_safetensors(" + path.string() + "): tensor '" + name + "' has dtype " +
                                  std::string(c10::toString(tensor.scalar_type())) +
                                  "; supported: " + supported_safetensors_dtypes());
    }
    prepared.push_back({name, *dtype, tensor.detach().to(torch::kCPU).contiguous()});
  }
  // Wider elements first: with the header padded to 8 bytes every tensor then starts aligned.
  std::sort(prepared.begin(), prepared.end(), [](const Prepared& a, const Prepared& b) {
    if (a.dtype.element_size != b.dtype.element_size) return a.dtype.element_size > b.dtype.element_size;
    return a.name < b.name;
  });

  nlohmann::json header = nlohmann::json::object();
  auto& meta = header["__metadata__"] = {{"format", "pt"}};
  for (const auto& [key, value] : metadata) meta[key] = value;
  uint64_t offset = 0;
  for (const Prepared& p : prepared) {
    const uint64_t nbytes = p.cpu.numel() * p.dtype.element_size;
    header[p.name] = {
        {"dtype", p.dtype.code}, {"shape", p.cpu.sizes().vec()}, {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_size = text.size();  // little-endian on every host we build for (see safetensors.cc)

  AtomicFile out(path);
  out.write(&header_size, sizeof header_size);
  out.write(text.data(), text.size());
  for (const Prepared& p : prepared) {
    if (p.cpu.numel() > 0) out.write(p.cpu.data_ptr(), p.cpu.numel() * p.dtype.element_size);
  }
  out.commit();
}

}  // namespace srformer
