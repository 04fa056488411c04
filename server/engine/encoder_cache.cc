#include "server/engine/encoder_cache.h"

#include <torch/torch.h>

#include <iterator>
#include <new>

namespace srformer::server {

namespace {

// FNV-1a over the ids' bytes.
uint64_t hash_ids(const std::vector<int64_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const int64_t id : ids) {
    auto v = static_cast<uint64_t>(id);
    for (int b = 0; b < 8; ++b, v >>= 8) h = (h ^ (v & 0xff)) * 0x100000001b3ull;
  }
  return h;
}

int64_t bytes_of(const torch::Tensor& t) { return static_cast<int64_t>(t.numel()) * t.element_size(); }

}  // namespace

EncoderCache::List::iterator EncoderCache::lookup(const std::vector<int64_t>& ids, uint64_t hash) {
  const auto [first, last] = by_hash_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    if (it->second->ids == ids) return it->second;
  }
  return lru_.end();
}

torch::Tensor EncoderCache::find(const std::vector<int64_t>& ids) {
  if (max_bytes_ <= 0 || lru_.empty()) return {};
  const auto it = lookup(ids, hash_ids(ids));
  if (it == lru_.end()) return {};
  lru_.splice(lru_.begin(), lru_, it);  // iterators stay valid
  return it->hidden;
}

void EncoderCache::insert(const std::vector<int64_t>& ids, const torch::Tensor& hidden) {
  const int64_t size = bytes_of(hidden);
  if (max_bytes_ <= 0 || size > max_bytes_) return;
  const uint64_t hash = hash_ids(ids);
  if (lookup(ids, hash) != lru_.end()) return;
  if (fail_copies_for_testing.load()) throw std::bad_alloc();
  // Everything that may throw (the copies, the nodes) before anything is dropped; splice keeps the
  // entry's iterator valid.
  List entry;
  entry.push_back({ids, hidden.clone(), hash});
  by_hash_.emplace(hash, entry.begin());
  while (bytes_ + size > max_bytes_ && !lru_.empty()) erase(std::prev(lru_.end()));
  lru_.splice(lru_.begin(), entry);
  bytes_ += size;
}

void EncoderCache::erase(List::iterator it) {
  const auto [first, last] = by_hash_.equal_range(it->hash);
  for (auto h = first; h != last; ++h) {
    if (h->second == it) {
      by_hash_.erase(h);
      break;
    }
  }
  bytes_ -= bytes_of(it->hidden);
  lru_.erase(it);
}

}  // namespace srformer::server
