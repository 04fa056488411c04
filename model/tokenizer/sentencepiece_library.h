#pragma once
// C++ side of the SentencePiece shim: opens libsrformer_spm.so in isolation (see spm_plugin_api.h)
// and wraps a processor handle in an RAII class.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace srformer {

struct SpmApi;  // resolved function table

class SentencePieceProcessor {
 public:
  // Throws std::runtime_error with the library's message when the model cannot be loaded.
  static SentencePieceProcessor load(const std::filesystem::path& model_file);
  static SentencePieceProcessor load_from_bytes(std::string_view serialized);

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  int32_t vocab_size() const;
  std::string id_to_piece(int32_t id) const;
  int32_t piece_to_id(std::string_view piece) const;  // unk id when absent
  bool is_control(int32_t id) const;
  bool is_unknown(int32_t id) const;
  bool is_byte(int32_t id) const;
  int32_t unk_id() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;

 private:
  struct Handle;
  explicit SentencePieceProcessor(std::shared_ptr<Handle> h) : handle_(std::move(h)) {}
  std::shared_ptr<Handle> handle_;
};

// Trains a SentencePiece model with the library's trainer ("--input=... --model_prefix=...").
void train_sentencepiece(const std::string& flags);

// Where the shim was found (for diagnostics); loads it on first use. Search order:
// $SRFORMER_SPM_PLUGIN, <exe dir>/../lib, <exe dir>, the install lib dir, the loader path.
std::string sentencepiece_plugin_path();

}  // namespace srformer
