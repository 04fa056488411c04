#pragma once
// The few protobuf wire-format encodings needed to write a SentencePiece ModelProto by hand: the
// model library must not link libprotobuf's generated code for sentencepiece (the shim owns its own
// protobuf, spm_plugin_api.h), and bytes are all the shim needs.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace srformer::wire {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "put_float writes the host's float bytes");

inline void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

inline void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

// Wire type 0. Negative int32 values are sign-extended to ten bytes, as protobuf does.
inline void put_int(std::string& out, int field, int64_t v) {
  put_tag(out, field, 0);
  put_varint(out, static_cast<uint64_t>(v));
}

inline void put_bool(std::string& out, int field, bool v) { put_int(out, field, v ? 1 : 0); }

// Wire type 2: strings, bytes and embedded messages.
inline void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

// Wire type 5: little-endian IEEE 754.
inline void put_float(std::string& out, int field, float v) {
  put_tag(out, field, 5);
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v);
  out.append(bytes, sizeof v);
}

}  // namespace srformer::wire
