#include "model/t5.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "model/dropout.h"
#include "model/io/weight_binder.h"
#include "model/kernels/avx2.h"

namespace srformer {

std::optional<torch::Tensor> t5_decoder_bias(const torch::Tensor& table, const std::vector<int64_t>& buckets,
                                             const torch::Tensor& relative, const torch::Tensor& allowed,
                                             torch::ScalarType dtype) {
  const bool fast = kernels::use_cpu_kernels() && relative.is_cpu() && allowed.is_cpu() && relative.dim() == 3 &&
                    relative.sizes() == allowed.sizes() && relative.scalar_type() == torch::kLong &&
                    allowed.scalar_type() == torch::kBool && dtype == torch::kFloat32 && table.is_cpu() &&
                    table.dim() == 2 && table.scalar_type() == torch::kFloat32 && !buckets.empty() &&
                    !(torch::GradMode::is_enabled() && table.requires_grad());  // training: autograd's form
  if (!fast) return std::nullopt;
  const int64_t B = relative.size(0), q = relative.size(1), T = relative.size(2), H = table.size(1);
  const auto rel = relative.contiguous();
  const auto ok = allowed.contiguous();
  const auto weights = table.contiguous();
  auto out = torch::empty({B, H, q, T}, weights.options());
  const int64_t* r = rel.data_ptr<int64_t>();
  const bool* a = ok.data_ptr<bool>();
  const float* w = weights.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const auto last = static_cast<int64_t>(buckets.size()) - 1;
  const float masked = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < q; ++i) {
      const int64_t row = (b * q + i) * T;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t distance = std::min(std::max<int64_t>(-r[row + t], 0), last);  // keys after the query: 0
        const int64_t bucket = buckets[static_cast<size_t>(distance)];
        const float add = a[row + t] ? 0.0f : masked;
        for (int64_t h = 0; h < H; ++h) o[((b * H + h) * q + i) * T + t] = w[bucket * H + h] + add;
      }
    }
  }
  return out;
}

std::vector<int64_t> t5_decoder_buckets(int64_t num_buckets, int64_t max_distance) {
  const int64_t distances = 2 * std::max<int64_t>(max_distance, 1) + 1;
  const auto buckets =
      relative_position_bucket(-torch::arange(distances, torch::kLong), false, num_buckets, max_distance);
  return {buckets.data_ptr<int64_t>(), buckets.data_ptr<int64_t>() + distances};
}

namespace {

struct T5EncoderLayer {
  SelfAttention self_attn;
  LayerNorm self_attn_norm, ffn_norm;
  FeedForward ffn;
};

struct T5DecoderLayer {
  SelfAttention self_attn;  // cross-attention lives in cross_[i] (cross_layers())
  LayerNorm self_attn_norm, cross_attn_norm, ffn_norm;
  FeedForward ffn;
};

class T5Model final : public EncoderDecoderModel {
 public:
  T5Model(const ModelConfig& config, const CheckpointReader& ckpt, const LoadOptions& options) {
    config_ = config;
    set_pieces(options);
    const bool pack = set_precision(options);
    WeightBinder binder(ckpt, compute_dtype_, device_);
    ParamBinder w(binder, options.raf_init, pack);
    auto embedding_and_head = bind_embedding_and_head(
        w, config_, "shared.weight", {"encoder.embed_tokens.weight", "decoder.embed_tokens.weight"}, pack);
    const auto& c = config_;
    const int64_t D = c.d_model;
    const int64_t I = c.inner_dim();
    shared_ = embedding_and_head.embedding;
    lm_head_ = std::move(embedding_and_head.lm_head);
    const auto act = activation_from_string(c.activation);
    auto attention = [&](const std::string& p) {
      SelfAttention a;
      a.q = Linear::bind(w, p + "q", I, D, false);
      a.k = Linear::bind(w, p + "k", I, D, false);
      a.v = Linear::bind(w, p + "v", I, D, false);
      a.o = Linear::bind(w, p + "o", D, I, false);
      a.heads = c.num_heads;
      a.scale = 1.0;
      return a;
    };
    auto ffn = [&](const std::string& p) {
      FeedForward f;
      if (c.gated_ffn) {
        f.in = Linear::bind(w, p + "wi_0", c.d_ff, D, false);
        f.gate = Linear::bind(w, p + "wi_1", c.d_ff, D, false);
      } else {
        f.in = Linear::bind(w, p + "wi", c.d_ff, D, false);
      }
      f.out = Linear::bind(w, p + "wo", D, c.d_ff, false);
      f.act = act;
      return f;
    };
    auto norm = [&](const std::string& p) { return LayerNorm::bind(w, p, D, c.layer_norm_eps, true); };
    const int64_t nb = c.relative_attention_num_buckets;
    enc_rel_bias_ = w.take("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", {nb, c.num_heads});
    dec_rel_bias_ = w.take("decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", {nb, c.num_heads});
    dec_buckets_ = t5_decoder_buckets(nb, c.relative_attention_max_distance);
    // Checkpoints converted by transformers 2.x (t5-small, t5-base, ...) also hold one for the first block's
    // cross-attention, which T5 has not; Hugging Face leaves it unread (_keys_to_ignore_on_load_unexpected).
    binder.ignore("decoder\\.block\\.0\\.layer\\.1\\.EncDecAttention\\.relative_attention_bias\\.weight");
    for (int64_t i = 0; i < c.encoder_layers; ++i) {
      const auto p = "encoder.block." + std::to_string(i) + ".";
      T5EncoderLayer l;
      l.self_attn = attention(p + "layer.0.SelfAttention.");
      l.self_attn.bf16_attention = pack;
      l.self_attn.kernel_attention = true;
      l.self_attn_norm = norm(p + "layer.0.layer_norm");
      l.ffn = ffn(p + "layer.1.DenseReluDense.");
      l.ffn_norm = norm(p + "layer.1.layer_norm");
      encoder_.push_back(std::move(l));
    }
    enc_final_norm_ = norm("encoder.final_layer_norm");
    for (int64_t i = 0; i < c.decoder_layers; ++i) {
      const auto p = "decoder.block." + std::to_string(i) + ".";
      T5DecoderLayer l;
      l.self_attn = attention(p + "layer.0.SelfAttention.");
      l.self_attn_norm = norm(p + "layer.0.layer_norm");
      const auto x = attention(p + "layer.1.EncDecAttention.");
      CrossAttention ca = make_cross_attention(x, w, p + "layer.1.EncDecAttention.", c, options, i);
      l.cross_attn_norm = norm(p + "layer.1.layer_norm");
      l.ffn = ffn(p + "layer.2.DenseReluDense.");
      l.ffn_norm = norm(p + "layer.2.layer_norm");
      cross_.push_back(std::move(ca));
      decoder_.push_back(std::move(l));
    }
    dec_final_norm_ = norm("decoder.final_layer_norm");
    finish_projections(encoder_, decoder_, cross_, lm_head_, shared_, options);
    binder.finish();
    params_ = w.take_params();
  }

  // Differentiable (training); inference callers hold a no-grad or inference-mode guard.
  EncoderOutput encode_batch(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                             const EncodeStop& stop) override {
    check_tokens(input_ids, "input_ids");
    const auto ids = input_ids.to(device_, torch::kLong);
    const int64_t B = ids.size(0);
    const int64_t k = ids.size(1);
    const auto mask = mask_of(attention_mask, ids);
    auto h = dropout(torch::embedding(shared_, ids), DropoutSite::kHidden);
    // The position bias depends on key − query only: its 2k − 1 diagonals, not [H, k, k] (bucketed
    // and gathered over k² positions), and apart from the padding mask [B, 1, 1, k], whose sum with
    // it would be [B, H, k, k].
    const DiagonalBias bias{position_bias_diagonals(enc_rel_bias_, k), k};
    const auto key_mask = additive_mask(mask.view({B, 1, 1, k}), compute_dtype_);
    // A long input in an encode the caller pauses runs its sublayers in pieces (LoadOptions), asking
    // `stop` between them too: otherwise a 16k-token attention sublayer stalls the caller for seconds.
    // (Inference only: the pieces apply no dropout.)
    const bool in_pieces = stop && !torch::GradMode::is_enabled() && !dropout_active(DropoutSite::kHidden) &&
                           !dropout_active(DropoutSite::kAttention);
    const int64_t queries = in_pieces ? piece_share(piece_scores_, B * k) : k;
    const int64_t positions = in_pieces ? piece_share(piece_positions_, B) : k;
    const auto pause = [&stop] { stop_if_asked(stop); };
    // In fp16 (CUDA) each sublayer's sum is clamped as Hugging Face's T5Block does: T5's feed-forward
    // outputs can overflow fp16.
    for (const auto& l : encoder_) {
      stop_if_asked(stop);
      if (queries < k) {
        h = h + l.self_attn.forward_in_pieces(l.self_attn_norm(h), bias, key_mask, queries, positions, pause);
      } else {
        h = h + dropout(l.self_attn.forward(l.self_attn_norm(h), bias, key_mask), DropoutSite::kHidden);
      }
      h = clamp_fp16_overflow(h);
      stop_if_asked(stop);
      if (positions < k) {
        h = feed_forward_in_pieces(l, h, positions, pause);
      } else {
        h = h + dropout(l.ffn(l.ffn_norm(h)), DropoutSite::kHidden);
      }
      h = clamp_fp16_overflow(h);
    }
    return {dropout(enc_final_norm_(h), DropoutSite::kHidden), mask};
  }

  torch::Tensor run_decoder(const torch::Tensor& tokens, DecodeContext& ctx) override {
    auto h = dropout(torch::embedding(shared_, tokens), DropoutSite::kHidden);
    const auto bias = decoder_bias(ctx.relative_positions(), ctx.self_allowed());
    for (size_t i = 0; i < decoder_.size(); ++i) {
      const auto& l = decoder_[i];
      h = clamp_fp16_overflow(
          h + dropout(ctx.self_attention(i, l.self_attn, l.self_attn_norm(h), bias), DropoutSite::kHidden));
      h = clamp_fp16_overflow(h +
                              dropout(ctx.cross_attention(i, cross_[i], l.cross_attn_norm(h)), DropoutSite::kHidden));
      h = clamp_fp16_overflow(h + dropout(l.ffn(l.ffn_norm(h)), DropoutSite::kHidden));
    }
    h = dropout(dec_final_norm_(h), DropoutSite::kHidden);
    if (config_.scales_decoder_outputs()) h = h * std::pow(static_cast<double>(config_.d_model), -0.5);
    return lm_head_(h).to(torch::kFloat32);
  }

  const std::vector<CrossAttention>& cross_layers() const override { return cross_; }

 private:
  // h + ffn(ffn_norm(h)) over blocks of `positions` positions, calling between() before each block after
  // the first (inference: no dropout). Every position's result is the one of the whole.
  static torch::Tensor feed_forward_in_pieces(const T5EncoderLayer& l, const torch::Tensor& h, int64_t positions,
                                              const std::function<void()>& between) {
    return concat_blocks(h.size(1), positions, 1, between, [&](int64_t first, int64_t n) {
      const auto part = h.narrow(1, first, n).contiguous();
      return part + l.ffn(l.ffn_norm(part));
    });
  }

  // relative [B|1, q, T] (key - query) -> additive bias [B|1, H, q, T], contiguous.
  torch::Tensor position_bias(const torch::Tensor& table, const torch::Tensor& relative, bool bidirectional) const {
    const auto buckets = relative_position_bucket(relative, bidirectional, config_.relative_attention_num_buckets,
                                                  config_.relative_attention_max_distance);
    return torch::embedding(table, buckets).permute({0, 3, 1, 2}).contiguous();
  }

  torch::Tensor decoder_bias(const torch::Tensor& relative, const torch::Tensor& allowed) const {
    if (auto fast = t5_decoder_bias(dec_rel_bias_, dec_buckets_, relative, allowed, compute_dtype_)) return *fast;
    return position_bias(dec_rel_bias_, relative, false) + additive_mask(allowed.unsqueeze(1), compute_dtype_);
  }

  // The encoder's (bidirectional) bias for key − query = −(k − 1) … k − 1, as one query row: [H, 2k − 1].
  torch::Tensor position_bias_diagonals(const torch::Tensor& table, int64_t k) const {
    const auto relative = torch::arange(-(k - 1), k, torch::TensorOptions().dtype(torch::kLong).device(table.device()));
    return position_bias(table, relative.view({1, 1, 2 * k - 1}), true).view({-1, 2 * k - 1});
  }

  torch::Tensor shared_, enc_rel_bias_, dec_rel_bias_;
  std::vector<int64_t> dec_buckets_;  // the decoder's bucket of each distance key - query = 0, -1, ...
  Linear lm_head_;                    // the shared embedding when tied
  LayerNorm enc_final_norm_, dec_final_norm_;
  std::vector<T5EncoderLayer> encoder_;
  std::vector<T5DecoderLayer> decoder_;
  std::vector<CrossAttention> cross_;
};

}  // namespace

std::unique_ptr<EncoderDecoderModel> load_t5(const ModelConfig& config, const CheckpointReader& ckpt,
                                             const LoadOptions& options) {
  return std::make_unique<T5Model>(config, ckpt, options);
}

}  // namespace srformer
