#pragma once
// Encoder outputs of recent inputs, found by their token ids, within a byte bound (least recently used
// out first). A document sent again — a retry after a deadline, the same text with other generation
// options, a page many users summarize — skips the encoder, which on a CPU costs as much as decoding a
// short summary. Decode-thread only (not synchronised).
#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace srformer::server {

class EncoderCache {
 public:
  // max_bytes <= 0: holds nothing (every find misses).
  explicit EncoderCache(int64_t max_bytes) : max_bytes_(max_bytes) {}

  // The encoder's hidden states [k, d] for exactly `ids` when held (now the most recently used), else
  // an undefined tensor.
  torch::Tensor find(const std::vector<int64_t>& ids);
  // Holds a copy of `hidden` [k, d] (a view of a larger tensor may be given) for `ids`, dropping the least
  // recently used entries to stay within the bound; nothing when it alone is over the bound or `ids` are
  // already held. Throws where the copy cannot be made (out of memory), the cache left as it was.
  void insert(const std::vector<int64_t>& ids, const torch::Tensor& hidden);

  // Test seam: while set, insert() fails as an out-of-memory copy would (std::bad_alloc).
  static inline std::atomic<bool> fail_copies_for_testing{false};

  int64_t bytes() const { return bytes_; }
  int64_t entries() const { return static_cast<int64_t>(lru_.size()); }
  int64_t max_bytes() const { return max_bytes_; }

 private:
  struct Entry {
    std::vector<int64_t> ids;
    torch::Tensor hidden;
    uint64_t hash;
  };
  using List = std::list<Entry>;
  List::iterator lookup(const std::vector<int64_t>& ids, uint64_t hash);
  void erase(List::iterator it);

  const int64_t max_bytes_;
  int64_t bytes_ = 0;
  List lru_;  // most recently used first
  std::unordered_multimap<uint64_t, List::iterator> by_hash_;
};

}  // namespace srformer::server
