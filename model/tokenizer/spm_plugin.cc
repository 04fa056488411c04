// The isolated SentencePiece shim (see spm_plugin_api.h). Built as its own shared library that
// links libsentencepiece; never linked into a process directly.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/spm_plugin_api.h"

namespace {

thread_local std::string g_last_error;

long fail(std::string message) {
  g_last_error = std::move(message);
  return -1;
}

long copy_out(const std::string& s, char* out, size_t cap) {
  if (out != nullptr && cap > 0) std::memcpy(out, s.data(), std::min(cap, s.size()));
  return static_cast<long>(s.size());
}

sentencepiece::SentencePieceProcessor* proc(void* h) { return static_cast<sentencepiece::SentencePieceProcessor*>(h); }

void* finish_load(std::unique_ptr<sentencepiece::SentencePieceProcessor> p, const sentencepiece::util::Status& st) {
  if (!st.ok()) {
    fail(st.ToString());
    return nullptr;
  }
  return p.release();  // owned by the caller until srf_spm_free
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int srf_spm_api_version(void) { return SRF_SPM_API_VERSION; }
__attribute__((visibility("default"))) const char* srf_spm_last_error(void) { return g_last_error.c_str(); }

__attribute__((visibility("default"))) void* srf_spm_load(const char* model_path) {
  try {
    auto p = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st = p->Load(model_path);
    return finish_load(std::move(p), st);
  } catch (const std::exception& e) {
    fail(e.what());
    return nullptr;
  }
}

__attribute__((visibility("default"))) void* srf_spm_load_from_bytes(const char* data, size_t len) {
  try {
    auto p = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto st = p->LoadFromSerializedProto(absl::string_view(data, len));
    return finish_load(std::move(p), st);
  } catch (const std::exception& e) {
    fail(e.what());
    return nullptr;
  }
}

__attribute__((visibility("default"))) void srf_spm_free(void* handle) {
  std::unique_ptr<sentencepiece::SentencePieceProcessor> owned(proc(handle));
}

__attribute__((visibility("default"))) long srf_spm_encode(void* handle, const char* text, size_t len, int32_t* out,
                                                           size_t cap) {
  try {
    std::vector<int> ids;
    const auto st = proc(handle)->Encode(absl::string_view(text, len), &ids);
    if (!st.ok()) return fail(st.ToString());
    for (size_t i = 0; i < ids.size() && i < cap; ++i) out[i] = ids[i];
    return static_cast<long>(ids.size());
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

__attribute__((visibility("default"))) long srf_spm_decode(void* handle, const int32_t* ids, size_t n, char* out,
                                                           size_t cap) {
  try {
    const std::vector<int> v(ids, ids + n);
    std::string text;
    const auto st = proc(handle)->Decode(v, &text);
    if (!st.ok()) return fail(st.ToString());
    return copy_out(text, out, cap);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

__attribute__((visibility("default"))) int srf_spm_vocab_size(void* handle) { return proc(handle)->GetPieceSize(); }

__attribute__((visibility("default"))) long srf_spm_id_to_piece(void* handle, int32_t id, char* out, size_t cap) {
  if (id < 0 || id >= proc(handle)->GetPieceSize()) return fail("token id out of range");
  return copy_out(proc(handle)->IdToPiece(id), out, cap);
}

__attribute__((visibility("default"))) int32_t srf_spm_piece_to_id(void* handle, const char* piece, size_t len) {
  return proc(handle)->PieceToId(absl::string_view(piece, len));
}

__attribute__((visibility("default"))) int srf_spm_token_flags(void* handle, int32_t id) {
  const auto* p = proc(handle);
  if (id < 0 || id >= p->GetPieceSize()) return 0;
  return (p->IsControl(id) ? 1 : 0) | (p->IsUnknown(id) ? 2 : 0) | (p->IsUnused(id) ? 4 : 0) | (p->IsByte(id) ? 8 : 0);
}

__attribute__((visibility("default"))) int32_t srf_spm_unk_id(void* handle) { return proc(handle)->unk_id(); }
__attribute__((visibility("default"))) int32_t srf_spm_bos_id(void* handle) { return proc(handle)->bos_id(); }
__attribute__((visibility("default"))) int32_t srf_spm_eos_id(void* handle) { return proc(handle)->eos_id(); }
__attribute__((visibility("default"))) int32_t srf_spm_pad_id(void* handle) { return proc(handle)->pad_id(); }

__attribute__((visibility("default"))) int srf_spm_train(const char* args) {
  try {
    const auto st = sentencepiece::SentencePieceTrainer::Train(args);
    if (!st.ok()) return static_cast<int>(fail(st.ToString()));
    return 0;
  } catch (const std::exception& e) {
    return static_cast<int>(fail(e.what()));
  }
}

}  // extern "C"
