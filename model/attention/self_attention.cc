#include "model/attention/self_attention.h"

#include <torch/torch.h>

#include <limits>

#include "model/attention/products.h"

namespace srformer {

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& bias) {
  auto scores = query_key_product(q, k);
  if (bias.defined()) scores = scores + bias;
  const auto probs = torch::softmax(scores.to(torch::kFloat32), -1).to(v.scalar_type());
  return weights_value_product(probs, v);
}

torch::Tensor additive_mask(const torch::Tensor& allowed, torch::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
}

torch::Tensor SelfAttention::forward(const torch::Tensor& x, const torch::Tensor& bias) const {
  return forward(x, bias, nullptr, nullptr);
}

torch::Tensor SelfAttention::forward(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor* keys,
                                     torch::Tensor* values) const {
  auto qh = split_heads(q(x), heads);
  if (scale != 1.0) qh = qh * scale;
  const auto kh = split_heads(k(x), heads);
  const auto vh = split_heads(v(x), heads);
  if (keys != nullptr) *keys = kh;
  if (values != nullptr) *values = vh;
  return o(merge_heads(attend(qh, kh, vh, bias)));
}

namespace {

// True when `cache` is the first slots of `room` and no other state holds this cache (a copied state
// shares it: the slots past its end must not be written for one of them while the other reads them).
bool cache_in_room(const torch::Tensor& cache, const torch::Tensor& room) {
  return room.defined() && cache.defined() && cache.use_count() == 1 && cache.data_ptr() == room.data_ptr() &&
         cache.size(0) == room.size(0) && cache.size(1) == room.size(1) && cache.size(3) == room.size(3) &&
         cache.size(2) < room.size(2) && cache.strides() == room.strides();
}

// Appends slot [B,H,1,d] to cache [B,H,T,d], which is kept as a view of the first T slots of `room`
// (capacity doubling): a step writes one slot instead of copying the whole cache (~50 MB per step for
// 32 T5-small rows at T = 64).
void append_slot(torch::Tensor& cache, torch::Tensor& room, const torch::Tensor& slot) {
  const int64_t T = cache.size(2);
  if (!cache_in_room(cache, room)) {
    auto shape = cache.sizes().vec();
    shape[2] = std::max<int64_t>(16, 2 * (T + 1));
    room = torch::empty(shape, cache.options());
    room.narrow(2, 0, T).copy_(cache);
  }
  room.narrow(2, T, 1).copy_(slot);
  cache = room.narrow(2, 0, T + 1);
}

}  // namespace

torch::Tensor SelfAttention::step(const torch::Tensor& x, torch::Tensor& cache_k, torch::Tensor& cache_v,
                                  torch::Tensor& room_k, torch::Tensor& room_v, const torch::Tensor& bias) const {
  auto qh = split_heads(q(x), heads);
  if (scale != 1.0) qh = qh * scale;
  append_slot(cache_k, room_k, split_heads(k(x), heads));
  append_slot(cache_v, room_v, split_heads(v(x), heads));
  return o(merge_heads(attend(qh, cache_k, cache_v, bias)));
}

}  // namespace srformer
