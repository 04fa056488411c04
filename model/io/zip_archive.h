#pragma once
// Read-only view of a zip archive held in memory, limited to what torch.save writes: stored (uncompressed)
// entries, with or without zip64 records. Every offset and size is checked against the bytes given, so a
// truncated or damaged archive is refused with a LoadError instead of being read out of bounds.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace srformer {

class ZipArchive {
 public:
  struct Entry {
    std::string name;
    uint64_t data_offset = 0;  // of the entry's bytes, past its local header
    uint64_t size = 0;
    uint32_t crc32 = 0;
  };

  // Parses the central directory of the `size` bytes at `data`, which must outlive this object. Throws
  // LoadError saying what is wrong (without a file name: the caller knows it).
  ZipArchive(const std::byte* data, size_t size);

  const std::vector<Entry>& entries() const { return entries_; }
  // The entry named exactly `name`, or null.
  const Entry* find(std::string_view name) const;
  std::string_view bytes(const Entry& entry) const;
  const std::byte* data(const Entry& entry) const { return data_ + entry.data_offset; }
  // Throws LoadError where the entry's bytes do not match the CRC-32 its headers declare.
  void check_crc(const Entry& entry) const;

 private:
  const std::byte* data_;
  size_t size_;
  std::vector<Entry> entries_;                     // in central-directory order
  std::unordered_map<std::string, size_t> index_;  // name -> position in entries_
};

// The CRC-32 (ISO-HDLC, as zip uses) of `bytes`.
uint32_t zip_crc32(std::string_view bytes);

}  // namespace srformer
