#include "model/tokenizer/sentencepiece_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <mutex>
#include <stdexcept>

#include "model/tokenizer/spm_plugin_api.h"

#ifndef SRFORMER_INSTALL_LIBDIR
#define SRFORMER_INSTALL_LIBDIR "/usr/local/lib"
#endif

namespace srformer {

struct SpmApi {
  std::string path;
  decltype(&srf_spm_last_error) last_error;
  decltype(&srf_spm_load) load;
  decltype(&srf_spm_load_from_bytes) load_from_bytes;
  decltype(&srf_spm_free) free;
  decltype(&srf_spm_encode) encode;
  decltype(&srf_spm_decode) decode;
  decltype(&srf_spm_vocab_size) vocab_size;
  decltype(&srf_spm_id_to_piece) id_to_piece;
  decltype(&srf_spm_piece_to_id) piece_to_id;
  decltype(&srf_spm_token_flags) token_flags;
  decltype(&srf_spm_unk_id) unk_id;
  decltype(&srf_spm_bos_id) bos_id;
  decltype(&srf_spm_eos_id) eos_id;
  decltype(&srf_spm_pad_id) pad_id;
  decltype(&srf_spm_train) train;
};

namespace {

constexpr const char* kPluginName = "libsrformer_spm.so";

std::filesystem::path exe_dir() {
  std::array<char, 4096> buf{};
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  return std::filesystem::path(std::string(buf.data(), static_cast<size_t>(n))).parent_path();
}

// The shim and everything it pulls in (libsentencepiece with its private protobuf-lite, and its
// own libstdc++/libc instances) go into a fresh link-map namespace. RTLD_DEEPBIND alone is not
// enough: the trainer writes to std::cerr, which an executable holds as a copy relocation, so a
// deep-bound libstdc++ reference reaches an uninitialised stream and crashes. Nothing but the C
// API (plain data, caller-owned buffers) crosses the boundary.
void* open_isolated(const std::string& path) { return ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL); }

template <typename Fn>
void resolve(void* lib, const char* name, Fn& fn, const std::string& path) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (fn == nullptr) throw std::runtime_error(path + " lacks symbol " + name + ": rebuild the project");
}

SpmApi load_api() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("SRFORMER_SPM_PLUGIN"); env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    const auto dir = exe_dir();
    if (!dir.empty()) {
      candidates.push_back((dir / ".." / "lib" / kPluginName).string());
      candidates.push_back((dir / kPluginName).string());
    }
    candidates.push_back(std::string(SRFORMER_INSTALL_LIBDIR) + "/" + kPluginName);
    candidates.emplace_back(kPluginName);
  }
  std::string errors;
  for (const auto& path : candidates) {
    if (path.find('/') != std::string::npos && !std::filesystem::exists(path)) {
      errors += "\n  " + path + ": no such file";  // said, or a SRFORMER_SPM_PLUGIN set wrongly went unnamed
      continue;
    }
    void* lib = open_isolated(path);
    if (lib == nullptr) {
      errors += "\n  " + path + ": " + ::dlerror();
      continue;
    }
    SpmApi api{};
    api.path = path;
    auto* version = reinterpret_cast<decltype(&srf_spm_api_version)>(::dlsym(lib, "srf_spm_api_version"));
    if (version == nullptr || version() != SRF_SPM_API_VERSION) {
      errors += "\n  " + path + ": wrong API version";
      continue;
    }
    resolve(lib, "srf_spm_last_error", api.last_error, path);
    resolve(lib, "srf_spm_load", api.load, path);
    resolve(lib, "srf_spm_load_from_bytes", api.load_from_bytes, path);
    resolve(lib, "srf_spm_free", api.free, path);
    resolve(lib, "srf_spm_encode", api.encode, path);
    resolve(lib, "srf_spm_decode", api.decode, path);
    resolve(lib, "srf_spm_vocab_size", api.vocab_size, path);
    resolve(lib, "srf_spm_id_to_piece", api.id_to_piece, path);
    resolve(lib, "srf_spm_piece_to_id", api.piece_to_id, path);
    resolve(lib, "srf_spm_token_flags", api.token_flags, path);
    resolve(lib, "srf_spm_unk_id", api.unk_id, path);
    resolve(lib, "srf_spm_bos_id", api.bos_id, path);
    resolve(lib, "srf_spm_eos_id", api.eos_id, path);
    resolve(lib, "srf_spm_pad_id", api.pad_id, path);
    resolve(lib, "srf_spm_train", api.train, path);
    return api;  // the library stays loaded for the life of the process
  }
  throw std::runtime_error(std::string("cannot load the SentencePiece shim ") + kPluginName +
                           "; set SRFORMER_SPM_PLUGIN to its path. Tried:" + errors);
}

const SpmApi& api() {
  static const SpmApi instance = load_api();
  return instance;
}

}  // namespace

struct SentencePieceProcessor::Handle {
  void* ptr = nullptr;
  ~Handle() {
    if (ptr != nullptr) api().free(ptr);
  }
};

SentencePieceProcessor SentencePieceProcessor::load(const std::filesystem::path& model_file) {
  auto h = std::make_shared<Handle>();
  h->ptr = api().load(model_file.c_str());
  if (h->ptr == nullptr) {
    throw std::runtime_error("cannot load SentencePiece model " + model_file.string() + ": " + api().last_error());
  }
  return SentencePieceProcessor(std::move(h));
}

SentencePieceProcessor SentencePieceProcessor::load_from_bytes(std::string_view serialized) {
  auto h = std::make_shared<Handle>();
  h->ptr = api().load_from_bytes(serialized.data(), serialized.size());
  if (h->ptr == nullptr)
    throw std::runtime_error(std::string("cannot parse SentencePiece model: ") + api().last_error());
  return SentencePieceProcessor(std::move(h));
}

std::vector<int32_t> SentencePieceProcessor::encode(std::string_view text) const {
  std::vector<int32_t> ids(text.size() + 8);
  for (;;) {
    const long n = api().encode(handle_->ptr, text.data(), text.size(), ids.data(), ids.size());
    if (n < 0) throw std::runtime_error(std::string("SentencePiece encode failed: ") + api().last_error());
    if (static_cast<size_t>(n) <= ids.size()) {
      ids.resize(static_cast<size_t>(n));
      return ids;
    }
    ids.resize(static_cast<size_t>(n));
  }
}

std::string SentencePieceProcessor::decode(const std::vector<int32_t>& ids) const {
  std::string out(ids.size() * 8 + 16, '\0');
  for (;;) {
    const long n = api().decode(handle_->ptr, ids.data(), ids.size(), out.data(), out.size());
    if (n < 0) throw std::runtime_error(std::string("SentencePiece decode failed: ") + api().last_error());
    const bool fits = static_cast<size_t>(n) <= out.size();
    out.resize(static_cast<size_t>(n));
    if (fits) return out;
  }
}

int32_t SentencePieceProcessor::vocab_size() const { return api().vocab_size(handle_->ptr); }

std::string SentencePieceProcessor::id_to_piece(int32_t id) const {
  std::string out(64, '\0');
  for (;;) {
    const long n = api().id_to_piece(handle_->ptr, id, out.data(), out.size());
    if (n < 0) throw std::out_of_range("SentencePiece id " + std::to_string(id) + ": " + api().last_error());
    const bool fits = static_cast<size_t>(n) <= out.size();
    out.resize(static_cast<size_t>(n));
    if (fits) return out;
  }
}

int32_t SentencePieceProcessor::piece_to_id(std::string_view piece) const {
  return api().piece_to_id(handle_->ptr, piece.data(), piece.size());
}
bool SentencePieceProcessor::is_control(int32_t id) const { return (api().token_flags(handle_->ptr, id) & 1) != 0; }
bool SentencePieceProcessor::is_unknown(int32_t id) const { return (api().token_flags(handle_->ptr, id) & 2) != 0; }
bool SentencePieceProcessor::is_byte(int32_t id) const { return (api().token_flags(handle_->ptr, id) & 8) != 0; }
int32_t SentencePieceProcessor::unk_id() const { return api().unk_id(handle_->ptr); }
int32_t SentencePieceProcessor::bos_id() const { return api().bos_id(handle_->ptr); }
int32_t SentencePieceProcessor::eos_id() const { return api().eos_id(handle_->ptr); }
int32_t SentencePieceProcessor::pad_id() const { return api().pad_id(handle_->ptr); }

void train_sentencepiece(const std::string& flags) {
  if (api().train(flags.c_str()) != 0) {
    throw std::runtime_error(std::string("SentencePiece training failed: ") + api().last_error());
  }
}

std::string sentencepiece_plugin_path() { return api().path; }

}  // namespace srformer
