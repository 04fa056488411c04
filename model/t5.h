#pragma once
// T5 v1.0 / v1.1 with the cross-attention variant from the config: RMS norm (pre-LN), relative
// position buckets shared from layer 0 of each stack, unscaled attention, relu or gated-gelu FFN,
// d_model^-0.5 before a tied LM head. Parameter names are Hugging Face's.
#include <memory>
#include <optional>
#include <vector>

#include "model/encoder_decoder.h"
#include "model/io/checkpoint.h"

namespace srformer {

std::unique_ptr<EncoderDecoderModel> load_t5(const ModelConfig& config, const CheckpointReader& ckpt,
                                             const LoadOptions& options);

// The decoder's bucket of each distance query - key = 0, 1, ... 2 * max_distance (relative_position_bucket,
// unidirectional); every longer distance has the last one's.
std::vector<int64_t> t5_decoder_buckets(int64_t num_buckets, int64_t max_distance);

// The decoder's self-attention bias [B, H, q, T] for relative (key - query) and allowed [B, q, T]: the
// embedding of their buckets in `table` [buckets, H] plus additive_mask(allowed), the same float sums, in
// one pass on the CPU in float32 with the CPU kernels on (the ~20 small LibTorch ops of that form cost more
// than a small model's attention at every step); nullopt elsewhere, and where autograd tracks `table`.
std::optional<torch::Tensor> t5_decoder_bias(const torch::Tensor& table, const std::vector<int64_t>& buckets,
                                             const torch::Tensor& relative, const torch::Tensor& allowed,
                                             torch::ScalarType dtype);

}  // namespace srformer
