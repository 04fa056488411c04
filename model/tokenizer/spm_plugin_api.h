#pragma once
// C interface of libsrformer_spm.so, our isolation shim around Debian's libsentencepiece.
// libsentencepiece carries its own exported copy of protobuf-lite 3.14, which clashes with the
// libprotobuf 3.21 that gRPC and LibTorch load. The shim is opened with dlopen(RTLD_LOCAL |
// RTLD_DEEPBIND) so its protobuf symbols bind inside the shim; only this C API crosses over.
// Buffers are caller-owned: functions returning a length report the size needed, and write
// nothing past `cap`. Negative return = error (message via srf_spm_last_error).
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SRF_SPM_API_VERSION 1

int srf_spm_api_version(void);
// Thread-local text of the last error in this thread.
const char* srf_spm_last_error(void);

void* srf_spm_load(const char* model_path);
void* srf_spm_load_from_bytes(const char* data, size_t len);
void srf_spm_free(void* handle);

long srf_spm_encode(void* handle, const char* text, size_t len, int32_t* out, size_t cap);
long srf_spm_decode(void* handle, const int32_t* ids, size_t n, char* out, size_t cap);
int srf_spm_vocab_size(void* handle);
long srf_spm_id_to_piece(void* handle, int32_t id, char* out, size_t cap);
int32_t srf_spm_piece_to_id(void* handle, const char* piece, size_t len);
// Bit 0: control, bit 1: unknown, bit 2: unused, bit 3: byte.
int srf_spm_token_flags(void* handle, int32_t id);
int32_t srf_spm_unk_id(void* handle);
int32_t srf_spm_bos_id(void* handle);
int32_t srf_spm_eos_id(void* handle);
int32_t srf_spm_pad_id(void* handle);

// Runs the SentencePiece trainer with a flag string ("--input=... --model_prefix=... ...").
int srf_spm_train(const char* args);

#ifdef __cplusplus
}
#endif
