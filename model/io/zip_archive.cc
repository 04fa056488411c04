#include "model/io/zip_archive.h"

#include <array>

#include "model/io/little_endian.h"
#include "model/io/load_error.h"

namespace srformer {
namespace {

constexpr uint32_t kLocalHeaderSig = 0x04034b50;
constexpr uint32_t kCentralHeaderSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kZip64EndSize = 56;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint32_t kSaturated32 = 0xffffffff;
constexpr uint16_t kSaturated16 = 0xffff;
constexpr uint16_t kZip64ExtraId = 0x0001;

[[noreturn]] void fail(const std::string& what) { throw LoadError("zip archive: " + what); }

// Little-endian reads of bytes already known to lie inside the archive.
uint16_t le16(const std::byte* p) { return static_cast<uint16_t>(read_little_endian(p, 2)); }
uint32_t le32(const std::byte* p) { return static_cast<uint32_t>(read_little_endian(p, 4)); }
uint64_t le64(const std::byte* p) { return read_little_endian(p, 8); }

// Whether [offset, offset + length) lies within `limit` bytes, without overflowing.
bool within(uint64_t offset, uint64_t length, uint64_t limit) { return offset <= limit && length <= limit - offset; }

// Sizes (and, in the central directory, the local header offset) that do not fit 32 bits are saturated
// and given in the zip64 extra field instead, in this order, each present only where saturated.
struct Zip64Fields {
  uint64_t size = 0;
  uint64_t compressed_size = 0;
  uint64_t local_offset = 0;
};

void resolve_zip64(const std::string& name, const std::byte* extra, uint64_t extra_len, Zip64Fields& f) {
  const bool needs = f.size == kSaturated32 || f.compressed_size == kSaturated32 || f.local_offset == kSaturated32;
  bool found = false;
  for (uint64_t at = 0; at < extra_len;) {
    if (extra_len - at < 4) fail("entry '" + name + "' has a malformed extra field");
    const uint16_t id = le16(extra + at);
    const uint16_t len = le16(extra + at + 2);
    at += 4;
    if (len > extra_len - at) fail("entry '" + name + "' has an extra field running past its header");
    if (id == kZip64ExtraId && needs && !found) {
      found = true;
      uint64_t field_at = 0;
      for (uint64_t* value : {&f.size, &f.compressed_size, &f.local_offset}) {
        if (*value != kSaturated32) continue;
        if (len - field_at < 8) fail("entry '" + name + "' has a zip64 extra field too short for its sizes");
        *value = le64(extra + at + field_at);
        field_at += 8;
      }
    }
    at += len;
  }
  if (needs && !found) fail("entry '" + name + "' declares zip64 sizes but has no zip64 extra field");
}

std::string method_name(uint16_t method) {
  switch (method) {
    case 8:
      return "deflate";
    case 12:
      return "bzip2";
    case 14:
      return "lzma";
    case 93:
      return "zstd";
    default:
      return "method " + std::to_string(method);
  }
}

}  // namespace

ZipArchive::ZipArchive(const std::byte* data, size_t size) : data_(data), size_(size) {
  if (size < kEndSize) fail("too short for a zip file (" + std::to_string(size) + " bytes)");
  // The end record sits before a comment of up to 64 KiB whose length it gives: search backwards for a
  // signature whose comment ends exactly at the end of the file.
  uint64_t end_at = size - kEndSize;
  const uint64_t lowest = end_at > 0xffff ? end_at - 0xffff : 0;
  for (;; --end_at) {
    if (le32(data + end_at) == kEndSig && le16(data + end_at + 20) == size - end_at - kEndSize) break;
    if (end_at == lowest) fail("no end-of-central-directory record (the file is truncated or not a zip)");
  }
  const std::byte* end = data + end_at;
  uint64_t disk = le16(end + 4);
  uint64_t cd_disk = le16(end + 6);
  uint64_t disk_entries = le16(end + 8);
  uint64_t count = le16(end + 10);
  uint64_t cd_size = le32(end + 12);
  uint64_t cd_offset = le32(end + 16);
  uint64_t records_at = end_at;  // where the central directory must end
  if (end_at >= kZip64LocatorSize && le32(data + end_at - kZip64LocatorSize) == kZip64LocatorSig) {
    const std::byte* locator = data + end_at - kZip64LocatorSize;
    const uint64_t zip64_at = le64(locator + 8);
    if (le32(locator + 4) != 0 || le32(locator + 16) > 1) fail("spans several disks");
    if (!within(zip64_at, kZip64EndSize, end_at - kZip64LocatorSize)) {
      fail("zip64 end record offset " + std::to_string(zip64_at) + " is outside the file");
    }
    const std::byte* zip64 = data + zip64_at;
    if (le32(zip64) != kZip64EndSig) fail("no zip64 end record where its locator points");
    disk = le32(zip64 + 16);
    cd_disk = le32(zip64 + 20);
    disk_entries = le64(zip64 + 24);
    count = le64(zip64 + 32);
    cd_size = le64(zip64 + 40);
    cd_offset = le64(zip64 + 48);
    records_at = zip64_at;
  } else if (count == kSaturated16 || cd_size == kSaturated32 || cd_offset == kSaturated32) {
    fail("declares zip64 sizes but has no zip64 end record locator");
  }
  if ((disk != 0 && disk != kSaturated16) || (cd_disk != 0 && cd_disk != kSaturated16) || disk_entries != count) {
    fail("spans several disks");
  }
  if (!within(cd_offset, cd_size, records_at)) {
    fail("central directory (offset " + std::to_string(cd_offset) + ", " + std::to_string(cd_size) +
         " bytes) is outside the file");
  }
  if (count > cd_size / kCentralHeaderSize) {
    fail("declares " + std::to_string(count) + " entries in a central directory of " + std::to_string(cd_size) +
         " bytes");
  }

  entries_.reserve(count);
  const uint64_t cd_end = cd_offset + cd_size;
  uint64_t at = cd_offset;
  for (uint64_t i = 0; i < count; ++i) {
    const std::string which = "central directory entry " + std::to_string(i);
    if (!within(at, kCentralHeaderSize, cd_end)) fail(which + " runs past the central directory");
    const std::byte* h = data + at;
    if (le32(h) != kCentralHeaderSig) fail(which + " has no central header signature");
    const uint16_t flags = le16(h + 8);
    const uint16_t method = le16(h + 10);
    const uint32_t crc = le32(h + 16);
    Zip64Fields f{le32(h + 24), le32(h + 20), le32(h + 42)};
    const uint64_t name_len = le16(h + 28);
    const uint64_t extra_len = le16(h + 30);
    const uint64_t comment_len = le16(h + 32);
    if (!within(at + kCentralHeaderSize, name_len + extra_len + comment_len, cd_end)) {
      fail(which + " has a name or extra field running past the central directory");
    }
    std::string name(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    resolve_zip64(name, h + kCentralHeaderSize + name_len, extra_len, f);
    at += kCentralHeaderSize + name_len + extra_len + comment_len;

    if ((flags & 1) != 0) fail("entry '" + name + "' is encrypted");
    if (method != 0) {
      fail("entry '" + name + "' is compressed (" + method_name(method) +
           "); torch.save stores its entries uncompressed, so this file was repacked by another tool");
    }
    if (f.compressed_size != f.size) fail("stored entry '" + name + "' has different compressed and plain sizes");

    // The local header repeats the name and sizes and has an extra field of its own (torch pads it so
    // that tensor data starts 64-byte aligned): the data starts after both.
    if (!within(f.local_offset, kLocalHeaderSize, cd_offset)) {
      fail("entry '" + name + "' has its local header outside the file");
    }
    const std::byte* local = data + f.local_offset;
    if (le32(local) != kLocalHeaderSig) fail("entry '" + name + "' has no local header signature");
    const uint64_t local_name_len = le16(local + 26);
    const uint64_t local_extra_len = le16(local + 28);
    const uint64_t header_end = f.local_offset + kLocalHeaderSize;
    if (!within(header_end, local_name_len + local_extra_len, cd_offset)) {
      fail("entry '" + name + "' has a local header running past the entries");
    }
    if (std::string_view(reinterpret_cast<const char*>(local + kLocalHeaderSize), local_name_len) != name) {
      fail("entry '" + name + "' has another name in its local header");
    }
    if (le16(local + 8) != method) fail("entry '" + name + "' has another method in its local header");
    Zip64Fields lf{le32(local + 22), le32(local + 18), 0};
    const bool deferred = (le16(local + 6) & 8) != 0 && lf.size == 0 && lf.compressed_size == 0;
    if (!deferred) {  // with a data descriptor the local header may leave sizes zero
      resolve_zip64(name, local + kLocalHeaderSize + local_name_len, local_extra_len, lf);
      if (lf.size != f.size || lf.compressed_size != f.compressed_size || le32(local + 14) != crc) {
        fail("entry '" + name + "' has other sizes or CRC in its local header than in the central directory");
      }
    }
    const uint64_t data_offset = header_end + local_name_len + local_extra_len;
    if (!within(data_offset, f.size, cd_offset)) {
      fail("entry '" + name + "' (" + std::to_string(f.size) + " bytes at offset " + std::to_string(data_offset) +
           ") runs past the entries' end (the file is truncated or damaged)");
    }
    entries_.push_back(Entry{std::move(name), data_offset, f.size, crc});
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (!index_.emplace(entries_[i].name, i).second) fail("entry '" + entries_[i].name + "' appears twice");
  }
}

const ZipArchive::Entry* ZipArchive::find(std::string_view name) const {
  const auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::string_view ZipArchive::bytes(const Entry& entry) const {
  return {reinterpret_cast<const char*>(data_ + entry.data_offset), static_cast<size_t>(entry.size)};
}

void ZipArchive::check_crc(const Entry& entry) const {
  const uint32_t actual = zip_crc32(bytes(entry));
  if (actual != entry.crc32) {
    fail("entry '" + entry.name + "' does not match its CRC-32 (the file is damaged)");
  }
}

uint32_t zip_crc32(std::string_view bytes) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) != 0 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t crc = 0xffffffffu;
  for (const char ch : bytes) crc = table[(crc ^ static_cast<unsigned char>(ch)) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

}  // namespace srformer
