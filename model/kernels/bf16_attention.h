#pragma once
// softmax(q kᵀ + bias) v for every (row, head) group with both products in bfloat16 (fp32 sums; AMX
// tiles or AVX512-BF16, as Bf16PackedMatrix chooses) and the softmax in fp32: the encoder's
// self-attention under `--dtype bf16` on the CPU.
// One group at a time per thread, so the [Tq, T] scores live in a per-thread buffer instead of a
// [B, H, Tq, T] tensor (256 MB per layer for 8 rows of 1024 tokens, page-faulted in afresh each time).
// A group's result depends only on its own operands: batching and padding (masked keys) change nothing.
// Plain C++ (no LibTorch). Use only where cpu_bf16_available().
#include <cstdint>
#include <memory>

namespace srformer::kernels {

struct AttentionShape {
  int64_t batch = 0, heads = 0;
  int64_t queries = 0;  // Tq
  int64_t keys = 0;     // T
  int64_t head_dim = 0;
};

// Additive bias, broadcast like LibTorch: element (b, h, i, j) at data[b * b_stride + h * h_stride +
// i * q_stride + j] (a stride of 0 repeats). -inf masks a key; a query with every key masked gets zeros.
struct AttentionBias {
  const float* data = nullptr;  // null: no bias
  int64_t b_stride = 0, h_stride = 0, q_stride = 0;
  // A second additive term per key, the same for every head and query: element (b, j) at
  // key_mask[b * key_mask_b_stride + j] (null: none). Added after `data`.
  const float* key_mask = nullptr;
  int64_t key_mask_b_stride = 0;
};

// Where element (b, h, t, j) of an operand lies: data[b * batch + h * head + t * row + j]. Contiguous
// [B, H, T, d] is {H*T*d, T*d, d}; the projections' own [B, T, H*d] layout is {T*H*d, d, H*d}, which
// saves splitting and merging heads (two copies of every operand) around the kernel.
struct HeadLayout {
  int64_t batch = 0, head = 0, row = 0;
  static HeadLayout heads_outer(int64_t heads, int64_t rows, int64_t d) { return {heads * rows * d, rows * d, d}; }
};

// The keys and values of one attention in the form a kernel's products read them (each kernel its own:
// kᵀ in fp32, or both in bfloat16 tiles), prepared once for several calls over blocks of its queries.
// A long input's attention in pieces (SelfAttention::forward_in_pieces) would otherwise prepare them
// again for every block (a paused 8k-token bf16 encode took 1.5x as long). `shape.queries` is not used.
class AttentionKeys {
 public:
  explicit AttentionKeys(const AttentionShape& shape) : shape_(shape) {}
  virtual ~AttentionKeys() = default;
  AttentionKeys(const AttentionKeys&) = delete;
  AttentionKeys& operator=(const AttentionKeys&) = delete;
  const AttentionShape& shape() const { return shape_; }
  // Throws std::invalid_argument unless `shape` has these keys' batch, heads, keys and head size.
  void check(const AttentionShape& shape, const char* kernel) const;

 private:
  AttentionShape shape_;
};

// q [B, H, Tq, d], k and v [B, H, T, d], out [B, H, Tq, d] in the given layouts (rows at least d
// apart); groups split over `threads` OpenMP threads.
void bf16_attention(const float* q, HeadLayout q_layout, const float* k, HeadLayout k_layout, const float* v,
                    HeadLayout v_layout, const AttentionBias& bias, float* out, HeadLayout out_layout,
                    const AttentionShape& shape, int threads);

// k and v converted once (they may change or go afterwards), for bf16_attention over any block of queries.
std::unique_ptr<const AttentionKeys> bf16_attention_keys(const float* k, HeadLayout k_layout, const float* v,
                                                         HeadLayout v_layout, const AttentionShape& shape, int threads);
// The same as above over keys from bf16_attention_keys() for this shape.
void bf16_attention(const float* q, HeadLayout q_layout, const AttentionKeys& keys, const AttentionBias& bias,
                    float* out, HeadLayout out_layout, const AttentionShape& shape, int threads);

// All four contiguous [B, H, T, d].
inline void bf16_attention(const float* q, const float* k, const float* v, const AttentionBias& bias, float* out,
                           const AttentionShape& shape, int threads) {
  const auto queries = HeadLayout::heads_outer(shape.heads, shape.queries, shape.head_dim);
  const auto keys = HeadLayout::heads_outer(shape.heads, shape.keys, shape.head_dim);
  bf16_attention(q, queries, k, keys, v, keys, bias, out, queries, shape, threads);
}

}  // namespace srformer::kernels
