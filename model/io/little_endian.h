#pragma once
// Little-endian integers in file formats (zip records, pickle opcodes), read byte by byte so that
// neither the host's byte order nor the bytes' alignment matters.
#include <cstddef>
#include <cstdint>

namespace srformer {

// The unsigned integer in the `n` (at most 8) bytes at `p`, least significant first.
template <typename Byte>
uint64_t read_little_endian(const Byte* p, size_t n) {
  static_assert(sizeof(Byte) == 1, "reads bytes");
  uint64_t value = 0;
  for (size_t i = n; i-- > 0;) value = value << 8 | static_cast<unsigned char>(p[i]);
  return value;
}

}  // namespace srformer
