#pragma once
// The few protobuf wire-format encodings needed to write a SentencePiece ModelProto by hand, and to
// list a serialized one's top-level fields: the model library must not link libprotobuf's generated
// code for sentencepiece (the shim owns its own protobuf, spm_plugin_api.h), and bytes are all the
// shim needs.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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

struct Field {
  int number;
  size_t end;  // offset just past the field
};

// A serialized message's top-level fields in order, without looking inside embedded ones; nullopt
// where the bytes are not well-formed wire format (a varint or length running past the end, or a
// wire type other than 0, 1, 2 and 5).
inline std::optional<std::vector<Field>> top_level_fields(std::string_view bytes) {
  size_t at = 0;
  const auto varint = [&]() -> std::optional<uint64_t> {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && at < bytes.size(); shift += 7) {
      const auto byte = static_cast<uint8_t>(bytes[at++]);
      v |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if (byte < 0x80) return v;
    }
    return std::nullopt;
  };
  std::vector<Field> fields;
  while (at < bytes.size()) {
    const auto tag = varint();
    if (!tag || (*tag >> 3) == 0 || (*tag >> 3) >= (uint64_t{1} << 29)) return std::nullopt;
    uint64_t skip = 0;
    switch (*tag & 7) {
      case 0:
        if (!varint()) return std::nullopt;
        break;
      case 1:
        skip = 8;
        break;
      case 2: {
        const auto length = varint();
        if (!length) return std::nullopt;
        skip = *length;
        break;
      }
      case 5:
        skip = 4;
        break;
      default:
        return std::nullopt;
    }
    if (skip > bytes.size() - at) return std::nullopt;
    at += skip;
    fields.push_back({static_cast<int>(*tag >> 3), at});
  }
  return fields;
}

}  // namespace srformer::wire
