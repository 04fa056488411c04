#include "model/attention/self_attention.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <vector>

#include "model/attention/products.h"
#include "model/dropout.h"
#include "model/kernels/attention_products.h"
#include "model/kernels/avx2.h"
#include "model/kernels/bf16_attention.h"
#include "model/kernels/bf16_linear.h"
#include "model/kernels/fp32_attention.h"

namespace srformer {

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& bias,
                     const torch::Tensor& key_mask) {
  auto scores = query_key_product(q, k);
  if (bias.defined()) scores = scores + bias;
  if (key_mask.defined()) scores = scores + key_mask;
  const auto probs = dropout(softmax_last_dim(scores.to(torch::kFloat32)).to(v.scalar_type()), DropoutSite::kAttention);
  return weights_value_product(probs, v);
}

torch::Tensor DiagonalBias::dense() const {
  const int64_t width = diagonals.size(1), keys = width - queries + 1;
  const auto opts = diagonals.options().dtype(torch::kLong);
  const auto index = torch::arange(keys, opts).view({1, keys}) - torch::arange(queries, opts).view({queries, 1}) +
                     (queries - 1);  // [Tq, T]: j − i + Tq − 1
  return diagonals.index_select(1, index.flatten()).view({1, diagonals.size(0), queries, keys});
}

namespace {

// The kernels' view of a dense additive bias broadcastable to `shape` ([B, H, Tq, T]); `hold` keeps a
// converted copy alive.
kernels::AttentionBias kernel_bias(const torch::Tensor& bias, const kernels::AttentionShape& shape,
                                   torch::Tensor& hold) {
  kernels::AttentionBias b;
  if (!bias.defined()) return b;
  // Broadcast dimensions keep stride 0; the key dimension must be dense.
  hold = bias.to(torch::kFloat32).expand({shape.batch, shape.heads, shape.queries, shape.keys});
  if (hold.stride(3) != 1) hold = hold.contiguous();
  b.data = hold.data_ptr<float>();
  b.b_stride = hold.stride(0);
  b.h_stride = hold.stride(1);
  b.q_stride = hold.stride(2);
  return b;
}

// The same bias read from its diagonals: query i's row starts Tq − 1 − i elements into its head's
// diagonals, so the row stride is −1.
kernels::AttentionBias kernel_bias(const DiagonalBias& bias, const kernels::AttentionShape& shape,
                                   torch::Tensor& hold) {
  const auto& d = bias.diagonals;
  if (d.dim() != 2 || (d.size(0) != shape.heads && d.size(0) != 1) || bias.queries != shape.queries ||
      d.size(1) != shape.queries + shape.keys - 1) {
    throw std::invalid_argument("DiagonalBias: needs diagonals [H|1, Tq + T - 1] for the attention's Tq and T");
  }
  hold = d.to(torch::kFloat32).contiguous();
  kernels::AttentionBias b;
  b.data = hold.data_ptr<float>() + (shape.queries - 1);
  b.h_stride = d.size(0) == 1 ? 0 : hold.stride(0);
  b.q_stride = -1;
  return b;
}

kernels::HeadLayout layout_of(const torch::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// The kernels read an operand's rows with unit stride.
torch::Tensor rows_dense(const torch::Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); }

kernels::AttentionShape shape_of(const torch::Tensor& q, const torch::Tensor& k) {
  kernels::AttentionShape shape;
  shape.batch = q.size(0);
  shape.heads = q.size(1);
  shape.queries = q.size(2);
  shape.keys = k.size(2);
  shape.head_dim = q.size(3);
  return shape;
}

// The keys and values of an attention prepared once for one of the CPU kernels (kernels::AttentionKeys),
// with what the kernel reads in place kept alive.
struct KernelKeys {
  std::unique_ptr<const kernels::AttentionKeys> keys;
  torch::Tensor k, v;  // the operands as the kernel read them (fp32: v is read by every call)
};

KernelKeys prepare_kernel_keys(const torch::Tensor& k, const torch::Tensor& v, bool bf16) {
  KernelKeys prepared{nullptr, rows_dense(k), rows_dense(v)};
  const auto prepare = bf16 ? &kernels::bf16_attention_keys : &kernels::fp32_attention_keys;
  prepared.keys = prepare(prepared.k.data_ptr<float>(), layout_of(prepared.k), prepared.v.data_ptr<float>(),
                          layout_of(prepared.v), shape_of(prepared.k, prepared.k), at::get_num_threads());
  return prepared;
}

// The CPU attention kernels' operand plumbing (kernels/bf16_attention.h, kernels/fp32_attention.h),
// over k and v as they lie or, where given, as prepared once for several blocks of queries.
template <typename Bias>
torch::Tensor attend_with_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const Bias& bias, const torch::Tensor& key_mask, bool bf16,
                                 const KernelKeys* prepared = nullptr) {
  // The operands are read where they lie (the projections' [B, T, H*d] seen as [B, H, T, d]) and the
  // result is written as [B, T, H, d]: merging the heads afterwards is then free.
  const torch::Tensor qc = rows_dense(q);
  const auto shape = shape_of(q, k);
  torch::Tensor bc;
  kernels::AttentionBias b = kernel_bias(bias, shape, bc);
  torch::Tensor mc;
  if (key_mask.defined()) {
    if (key_mask.dim() != 4 || key_mask.size(1) != 1 || key_mask.size(2) != 1) {
      throw std::invalid_argument("attend_bf16: key_mask must be [B|1, 1, 1, T]");
    }
    mc = key_mask.to(torch::kFloat32).expand({shape.batch, 1, 1, shape.keys}).contiguous();
    b.key_mask = mc.data_ptr<float>();
    b.key_mask_b_stride = shape.keys;
  }
  auto out = torch::empty({shape.batch, shape.queries, shape.heads, shape.head_dim}, qc.options());
  const kernels::HeadLayout out_layout{out.stride(0), out.stride(2), out.stride(1)};
  if (prepared != nullptr) {
    using Kernel =
        void (*)(const float*, kernels::HeadLayout, const kernels::AttentionKeys&, const kernels::AttentionBias&,
                 float*, kernels::HeadLayout, const kernels::AttentionShape&, int);
    const Kernel run = bf16 ? Kernel{kernels::bf16_attention} : Kernel{kernels::fp32_attention};
    run(qc.data_ptr<float>(), layout_of(qc), *prepared->keys, b, out.data_ptr<float>(), out_layout, shape,
        at::get_num_threads());
  } else {
    const torch::Tensor kc = rows_dense(k), vc = rows_dense(v);
    using Kernel = void (*)(const float*, kernels::HeadLayout, const float*, kernels::HeadLayout, const float*,
                            kernels::HeadLayout, const kernels::AttentionBias&, float*, kernels::HeadLayout,
                            const kernels::AttentionShape&, int);
    const Kernel run = bf16 ? Kernel{kernels::bf16_attention} : Kernel{kernels::fp32_attention};
    run(qc.data_ptr<float>(), layout_of(qc), kc.data_ptr<float>(), layout_of(kc), vc.data_ptr<float>(), layout_of(vc),
        b, out.data_ptr<float>(), out_layout, shape, at::get_num_threads());
  }
  return out.transpose(1, 2);
}

}  // namespace

torch::Tensor attend_bf16(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& bias, const torch::Tensor& key_mask) {
  return attend_with_kernel(q, k, v, bias, key_mask, true);
}

torch::Tensor attend_fp32_kernel(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& bias, const torch::Tensor& key_mask) {
  return attend_with_kernel(q, k, v, bias, key_mask, false);
}

torch::Tensor attend_slots(const torch::Tensor& q, const torch::Tensor& cache_k, const torch::Tensor& cache_v,
                           const torch::Tensor& slot_rows, const torch::Tensor& bias) {
  const int64_t B = q.size(0), H = q.size(1), d = q.size(3), T = cache_k.size(2);
  const auto float_cpu = [](const torch::Tensor& t) { return t.is_cpu() && t.scalar_type() == torch::kFloat32; };
  if (!float_cpu(q) || !float_cpu(cache_k) || !float_cpu(cache_v) || q.size(2) != 1 ||
      cache_k.strides() != cache_v.strides() || cache_k.stride(3) != 1 || slot_rows.scalar_type() != torch::kInt32 ||
      slot_rows.sizes() != torch::IntArrayRef{B, T} || slot_rows.stride(1) != 1) {
    throw std::invalid_argument("attend_slots: needs CPU float32 q [B,H,1,d] and caches, int32 slot rows [B,T]");
  }
  if (!kernels::avx2_fma_available()) throw std::logic_error("attend_slots: this CPU lacks AVX2 + FMA");
  const int32_t* rows = slot_rows.data_ptr<int32_t>();
  const auto rows_held = cache_k.size(0);
  for (int64_t b = 0; b < B; ++b) {  // B x T integers: nothing next to the step, and no read out of bounds
    const int32_t* r = rows + b * slot_rows.stride(0);
    if (std::any_of(r, r + T, [rows_held](int32_t x) { return x < 0 || x >= rows_held; })) {
      throw std::out_of_range("attend_slots: a slot row outside the caches' " + std::to_string(rows_held) + " rows");
    }
  }
  const auto qc = q.stride(3) == 1 ? q : q.contiguous();
  kernels::AttentionBias b;
  torch::Tensor bc;
  if (bias.defined()) {
    bc = bias.to(torch::kFloat32).expand({B, H, 1, T});
    if (bc.stride(3) != 1) bc = bc.contiguous();
    b.data = bc.data_ptr<float>();
    b.b_stride = bc.stride(0);
    b.h_stride = bc.stride(1);
  }
  auto out = torch::empty({B, 1, H, d}, qc.options());  // merging the heads afterwards is free
  kernels::SlotAttentionShape shape{B, H, T, d};
  kernels::slot_attention(qc.data_ptr<float>(), {qc.stride(0), qc.stride(1), qc.stride(2)}, cache_k.data_ptr<float>(),
                          cache_v.data_ptr<float>(), {cache_k.stride(0), cache_k.stride(1), cache_k.stride(2)}, rows,
                          slot_rows.stride(0), b, out.data_ptr<float>(), {out.stride(0), out.stride(2), out.stride(1)},
                          shape, at::get_num_threads());
  return out.transpose(1, 2);
}

torch::Tensor additive_mask(const torch::Tensor& allowed, torch::ScalarType dtype) {
  return torch::zeros(allowed.sizes(), allowed.options().dtype(dtype))
      .masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
}

namespace {

const torch::Tensor& dense_of(const torch::Tensor& bias) { return bias; }
torch::Tensor dense_of(const DiagonalBias& bias) { return bias.dense(); }

// Which of the CPU attention kernels runs an attention whose operands are like `t` (none: LibTorch's
// form). The kernels have no dropout (nor autograd): training takes LibTorch's form.
enum class KernelPath { kNone, kFp32, kBf16 };

KernelPath kernel_path(const SelfAttention& a, const torch::Tensor& t) {
  if (!is_cpu_inference_float(t) || dropout_active(DropoutSite::kAttention)) return KernelPath::kNone;
  if (a.bf16_attention && kernels::cpu_bf16_available()) return KernelPath::kBf16;
  if (a.kernel_attention && kernels::use_cpu_kernels() && kernels::fp32_attention_available()) return KernelPath::kFp32;
  return KernelPath::kNone;
}

// The attention output of the queries of xq ([B, Tq, D]) over keys/values kh, vh ([B, H, T, d]), which
// `prepared` (when given) holds in the kernel's form.
template <typename Bias>
torch::Tensor attend_queries(const SelfAttention& a, const torch::Tensor& xq, const torch::Tensor& kh,
                             const torch::Tensor& vh, const Bias& bias, const torch::Tensor& key_mask,
                             const KernelKeys* prepared = nullptr) {
  auto qh = split_heads(a.q(xq), a.heads);
  if (a.scale != 1.0) qh = qh * a.scale;
  const auto path = is_cpu_inference_float(qh) ? kernel_path(a, kh) : KernelPath::kNone;
  if (path != KernelPath::kNone) {
    return a.o(merge_heads(attend_with_kernel(qh, kh, vh, bias, key_mask, path == KernelPath::kBf16, prepared)));
  }
  return a.o(merge_heads(attend(qh, kh, vh, dense_of(bias), key_mask)));
}

template <typename Bias>
torch::Tensor attention_forward(const SelfAttention& a, const torch::Tensor& x, const Bias& bias, torch::Tensor* keys,
                                torch::Tensor* values, const torch::Tensor& key_mask) {
  auto kh = split_heads(a.k(x), a.heads);
  auto vh = split_heads(a.v(x), a.heads);
  if (kernel_path(a, kh) != KernelPath::kNone) {
    // The kernels read a head's keys and values once per block of queries: a head's rows side by side,
    // not strided by all heads, take ~10% off a T5-small encode at 2k–4k tokens and ~30% at 16k (session 34).
    kh = kh.contiguous();
    vh = vh.contiguous();
  }
  if (keys != nullptr) *keys = kh;
  if (values != nullptr) *values = vh;
  return attend_queries(a, x, kh, vh, bias, key_mask);
}

}  // namespace

torch::Tensor SelfAttention::forward(const torch::Tensor& x, const torch::Tensor& bias,
                                     const torch::Tensor& key_mask) const {
  return attention_forward(*this, x, bias, nullptr, nullptr, key_mask);
}

torch::Tensor SelfAttention::forward(const torch::Tensor& x, const DiagonalBias& bias,
                                     const torch::Tensor& key_mask) const {
  return attention_forward(*this, x, bias, nullptr, nullptr, key_mask);
}

torch::Tensor SelfAttention::forward(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor* keys,
                                     torch::Tensor* values, const torch::Tensor& key_mask) const {
  return attention_forward(*this, x, bias, keys, values, key_mask);
}

torch::Tensor SelfAttention::forward_in_pieces(const torch::Tensor& x, const DiagonalBias& bias,
                                               const torch::Tensor& key_mask, int64_t queries, int64_t positions,
                                               const std::function<void()>& between) const {
  const int64_t T = x.size(1);
  if (queries <= 0 || positions <= 0) {
    throw std::invalid_argument("SelfAttention::forward_in_pieces: queries and positions must be positive");
  }
  if (bias.queries != T) throw std::invalid_argument("SelfAttention::forward_in_pieces: the bias is not x's");
  const auto kh = project_heads(k, x, heads, positions, between);
  between();
  const auto vh = project_heads(v, x, heads, positions, between);
  // A kernel's form of the keys and values, made once for every block (not once per block).
  const auto path = kernel_path(*this, kh);
  const auto prepared =
      path == KernelPath::kNone ? std::optional<KernelKeys>{} : prepare_kernel_keys(kh, vh, path == KernelPath::kBf16);
  between();
  return concat_blocks(T, queries, 1, between, [&](int64_t first, int64_t n) {
    // Queries [first, first + n) read the diagonals j − i = −(first + n − 1) … T − 1 − first.
    const DiagonalBias part{bias.diagonals.narrow(1, T - first - n, n + T - 1), n};
    return attend_queries(*this, x.narrow(1, first, n).contiguous(), kh, vh, part, key_mask,
                          prepared ? &*prepared : nullptr);
  });
}

namespace {

// Appends one slot ([B, H, 1, d]) to a cache [B, H, T, d]. The cache spans the first T slots of a
// buffer with room for more, so a step writes one slot instead of copying the whole cache (a copy
// per step and layer makes long outputs quadratic). The buffer grows by half when full; a cache
// shared with another state, or one that state operations made dense, moves to a new buffer. The
// cache is re-pointed at its storage with set_() rather than made a view: a view would keep the
// buffer alive as its base, and the storage would never look exclusively ours.
void append_slot(torch::Tensor& cache, const torch::Tensor& slot) {
  const int64_t B = cache.size(0), H = cache.size(1), T = cache.size(2), d = cache.size(3);
  const int64_t elems = B == 0 ? 0 : (B - 1) * cache.stride(0) + H * cache.stride(1);  // spanned with slot T
  const bool room =
      cache.storage_offset() == 0 && uniform_group_stride(cache) >= (T + 1) * d && owns_storage(cache) &&
      static_cast<int64_t>(cache.storage().nbytes()) >= elems * static_cast<int64_t>(cache.element_size());
  if (!room) {
    const int64_t capacity = grown_cache_capacity(T);
    auto buffer = torch::empty({B, H, capacity, d}, slot.options());
    buffer.narrow(2, 0, T).copy_(cache);
    cache = std::move(buffer);
  }
  const std::vector<int64_t> strides = cache.strides().vec();
  cache.set_(cache.storage(), 0, {B, H, T + 1, d}, strides);
  cache.narrow(2, T, 1).copy_(slot);
}

}  // namespace

int64_t grown_cache_capacity(int64_t slots) { return slots + slots / 2 + 8; }

int64_t cache_capacity(int64_t slots) { return slots == 0 ? 0 : std::max(slots, grown_cache_capacity(slots - 1)); }

torch::Tensor SelfAttention::step(const torch::Tensor& x, torch::Tensor& cache_k, torch::Tensor& cache_v,
                                  const torch::Tensor& bias, const torch::Tensor& slot_rows) const {
  auto qh = split_heads(q(x), heads);
  if (scale != 1.0) qh = qh * scale;
  append_slot(cache_k, split_heads(k(x), heads));
  append_slot(cache_v, split_heads(v(x), heads));
  if (slot_rows.defined()) return o(merge_heads(attend_slots(qh, cache_k, cache_v, slot_rows, bias)));
  return o(merge_heads(attend(qh, cache_k, cache_v, bias)));
}

}  // namespace srformer
