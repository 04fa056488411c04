#pragma once
// Test-side writer of pytorch_model.bin files as Python's torch.save writes them: a pickle (protocol 2) of
// an OrderedDict of _rebuild_tensor_v2 calls whose storages are persistent ids, emitted opcode by opcode
// with the memo indices Python's pickler assigns, inside a stored zip with 64-byte-aligned records. Written
// independently of the reader (own CRC, own layout) so that the two check each other.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace srformer::testing {

inline std::string le_bytes(uint64_t value, int n) {
  std::string out(static_cast<size_t>(n), '\0');
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<char>((value >> (8 * i)) & 0xff);
  return out;
}

// One tensor of the state dict: a view of storage `key` (`storage_numel` elements of `storage_class`).
struct SavedTensor {
  std::string name;
  std::string key;
  std::string storage_class = "FloatStorage";
  int64_t storage_numel = 0;
  int64_t offset = 0;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// Emits pickle opcodes, memoizing as Python's pickler does (every str, non-empty tuple, global and
// reduced object; a str or global seen before is fetched from the memo instead).
class PickleWriter {
 public:
  std::string bytes;

  void proto() { bytes += "\x80\x02"; }
  void op(char c) { bytes += c; }
  void put() {
    bytes += memo_ < 256 ? "q" + le_bytes(memo_, 1) : "r" + le_bytes(memo_, 4);
    ++memo_;
  }
  void get(uint32_t index) { bytes += index < 256 ? "h" + le_bytes(index, 1) : "j" + le_bytes(index, 4); }
  void str(const std::string& s) {
    if (const auto it = strings_.find(s); it != strings_.end()) return get(it->second);
    bytes += "X" + le_bytes(s.size(), 4) + s;
    strings_[s] = memo_;
    put();
  }
  void global(const std::string& module, const std::string& name) {
    const std::string qualified = module + "\n" + name + "\n";
    if (const auto it = globals_.find(qualified); it != globals_.end()) return get(it->second);
    bytes += "c" + qualified;
    globals_[qualified] = memo_;
    put();
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      bytes += "K" + le_bytes(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      bytes += "M" + le_bytes(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      bytes += "J" + le_bytes(static_cast<uint64_t>(v), 4);
    } else {
      bytes += "\x8a\x08" + le_bytes(static_cast<uint64_t>(v), 8);
    }
  }
  // A tuple of ints: TUPLE1/2/3 for up to three items, MARK ... TUPLE beyond; memoized unless empty.
  void int_tuple(const std::vector<int64_t>& items) {
    if (items.empty()) return op(')');
    if (items.size() > 3) op('(');
    for (const int64_t v : items) integer(v);
    op(items.size() > 3 ? 't' : static_cast<char>(0x84 + items.size()));
    put();
  }
  // OrderedDict(): GLOBAL, EMPTY_TUPLE, REDUCE, memoized.
  void ordered_dict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
    put();
  }

 private:
  uint32_t memo_ = 0;
  std::map<std::string, uint32_t> strings_;
  std::map<std::string, uint32_t> globals_;
};

// data.pkl of torch.save(state_dict): items added with SETITEMS, then BUILD with {'_metadata': ...}.
inline std::string torch_save_pickle(const std::vector<SavedTensor>& tensors) {
  PickleWriter w;
  w.proto();
  w.ordered_dict();
  std::map<std::string, bool> keys_seen;
  if (tensors.size() > 1) w.op('(');
  for (const SavedTensor& t : tensors) {
    w.str(t.name);
    w.global("torch._utils", "_rebuild_tensor_v2");
    w.op('(');
    // The persistent id, a 5-tuple, memoized like any tuple; BINPERSID's result is not.
    w.op('(');
    w.str("storage");
    w.global("torch", t.storage_class);
    w.str(t.key);
    w.str("cpu");
    w.integer(t.storage_numel);
    w.op('t');
    w.put();
    w.op('Q');
    w.integer(t.offset);
    w.int_tuple(t.sizes);
    w.int_tuple(t.strides);
    w.op('\x89');      // requires_grad False
    w.ordered_dict();  // backward_hooks
    w.op('t');
    w.put();
    w.op('R');
    w.put();
  }
  if (tensors.size() == 1) w.op('s');
  if (tensors.size() > 1) w.op('u');
  // state: {'_metadata': OrderedDict([('', {'version': 1})])}
  w.op('}');
  w.put();
  w.str("_metadata");
  w.ordered_dict();
  w.str("");
  w.op('}');
  w.put();
  w.str("version");
  w.integer(1);
  w.op('s');
  w.op('s');
  w.op('s');
  w.op('b');
  w.op('.');
  return w.bytes;
}

inline uint32_t test_crc32(const std::string& bytes) {
  uint32_t crc = 0xffffffffu;
  for (const char c : bytes) {
    crc ^= static_cast<unsigned char>(c);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

struct ZipRecord {
  std::string name;
  std::string bytes;
  uint16_t method = 0;  // 0 stored; anything else only labels the (unchanged) bytes
};

// A zip as torch's writer lays it out: each local header padded (an "FB" extra field) so that the record
// starts at a multiple of 64; with `zip64`, every size and offset goes through zip64 records instead.
inline std::string zip_records(const std::vector<ZipRecord>& records, bool zip64 = false) {
  std::string out;
  std::string central;
  for (const ZipRecord& r : records) {
    const uint64_t offset = out.size();
    const uint32_t crc = test_crc32(r.bytes);
    std::string extra;
    if (zip64) extra = le_bytes(1, 2) + le_bytes(16, 2) + le_bytes(r.bytes.size(), 8) + le_bytes(r.bytes.size(), 8);
    const size_t unpadded = offset + 30 + r.name.size() + extra.size() + 4;
    extra += "FB" + le_bytes((64 - unpadded % 64) % 64, 2) + std::string((64 - unpadded % 64) % 64, 'Z');
    const uint64_t size32 = zip64 ? 0xffffffffu : r.bytes.size();
    out += le_bytes(0x04034b50, 4) + le_bytes(zip64 ? 45 : 20, 2) + le_bytes(0, 2) + le_bytes(r.method, 2) +
           le_bytes(0, 4) + le_bytes(crc, 4) + le_bytes(size32, 4) + le_bytes(size32, 4) + le_bytes(r.name.size(), 2) +
           le_bytes(extra.size(), 2) + r.name + extra + r.bytes;
    const std::string central_extra = zip64 ? le_bytes(1, 2) + le_bytes(24, 2) + le_bytes(r.bytes.size(), 8) +
                                                  le_bytes(r.bytes.size(), 8) + le_bytes(offset, 8)
                                            : "";
    central += le_bytes(0x02014b50, 4) + le_bytes(zip64 ? 45 : 20, 2) + le_bytes(zip64 ? 45 : 20, 2) + le_bytes(0, 2) +
               le_bytes(r.method, 2) + le_bytes(0, 4) + le_bytes(crc, 4) + le_bytes(size32, 4) + le_bytes(size32, 4) +
               le_bytes(r.name.size(), 2) + le_bytes(central_extra.size(), 2) + le_bytes(0, 2) + le_bytes(0, 2) +
               le_bytes(0, 2) + le_bytes(0, 4) + le_bytes(zip64 ? 0xffffffffu : offset, 4) + r.name + central_extra;
  }
  const uint64_t cd_offset = out.size();
  out += central;
  if (zip64) {
    const uint64_t end64 = out.size();
    out += le_bytes(0x06064b50, 4) + le_bytes(44, 8) + le_bytes(45, 2) + le_bytes(45, 2) + le_bytes(0, 4) +
           le_bytes(0, 4) + le_bytes(records.size(), 8) + le_bytes(records.size(), 8) + le_bytes(central.size(), 8) +
           le_bytes(cd_offset, 8);
    out += le_bytes(0x07064b50, 4) + le_bytes(0, 4) + le_bytes(end64, 8) + le_bytes(1, 4);
  }
  out += le_bytes(0x06054b50, 4) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(zip64 ? 0xffff : records.size(), 2) +
         le_bytes(zip64 ? 0xffff : records.size(), 2) + le_bytes(zip64 ? 0xffffffffu : central.size(), 4) +
         le_bytes(zip64 ? 0xffffffffu : cd_offset, 4) + le_bytes(0, 2);
  return out;
}

// The records of a torch.save archive in its order: data.pkl, byteorder, data/<key>..., version.
inline std::vector<ZipRecord> torch_save_records(const std::string& pickle,
                                                 const std::map<std::string, std::string>& storages,
                                                 const std::string& prefix = "archive/") {
  std::vector<ZipRecord> records{{prefix + "data.pkl", pickle}, {prefix + "byteorder", "little"}};
  for (const auto& [key, bytes] : storages) records.push_back({prefix + "data/" + key, bytes});
  records.push_back({prefix + "version", "3\n"});
  records.push_back({prefix + ".data/serialization_id", "1234567890123456789012345678901234567890"});
  return records;
}

}  // namespace srformer::testing
