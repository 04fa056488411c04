#include "model/bart.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "model/dropout.h"
#include "model/io/weight_binder.h"

namespace srformer {

namespace {

struct BartEncoderLayer {
  SelfAttention self_attn;
  LayerNorm self_attn_norm, final_norm;
  FeedForward ffn;
};

struct BartDecoderLayer {
  SelfAttention self_attn;  // cross-attention lives in cross_[i] (cross_layers())
  LayerNorm self_attn_norm, cross_attn_norm, final_norm;
  FeedForward ffn;
};

// A checkpoint of BartModel rather than BartForConditionalGeneration: no tensor under "model.", but the
// encoder's positions without it.
bool is_base_model_checkpoint(const CheckpointReader& ckpt) {
  const auto names = ckpt.names();
  return ckpt.contains("encoder.embed_positions.weight") &&
         std::none_of(names.begin(), names.end(), [](const std::string& n) { return n.rfind("model.", 0) == 0; });
}

class BartModel final : public EncoderDecoderModel {
 public:
  BartModel(const ModelConfig& config, const CheckpointReader& ckpt, const LoadOptions& options) {
    config_ = config;
    set_pieces(options);
    const bool pack = set_precision(options);
    WeightBinder binder(ckpt, compute_dtype_, device_);
    // facebook/bart-base and bart-large were saved from BartModel: no "model." before the names and no head,
    // which Hugging Face's from_pretrained adds (tied lm_head, zero final_logits_bias). Saved back with it.
    if (is_base_model_checkpoint(ckpt)) binder.read_without_prefix("model.");
    // fairseq's stack versions, left in conversions of its checkpoints (Hugging Face ignores them too).
    binder.ignore("model\\.(encoder|decoder)\\.version");
    ParamBinder w(binder, options.raf_init, pack);
    auto embedding_and_head =
        bind_embedding_and_head(w, config_, "model.shared.weight",
                                {"model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}, pack);
    const auto& c = config_;
    const int64_t D = c.d_model;
    shared_ = embedding_and_head.embedding;
    lm_head_ = std::move(embedding_and_head.lm_head);
    const auto flb = binder.take_optional("final_logits_bias", {1, c.vocab_size});
    final_logits_bias_ = w.record(
        "final_logits_bias",
        flb ? *flb : torch::zeros({1, c.vocab_size}, torch::TensorOptions().dtype(compute_dtype_).device(device_)));
    const int64_t P = c.max_position_embeddings + 2;
    enc_pos_ = w.take("model.encoder.embed_positions.weight", {P, D});
    dec_pos_ = w.take("model.decoder.embed_positions.weight", {P, D});
    enc_ln_emb_ = LayerNorm::bind(w, "model.encoder.layernorm_embedding", D, c.layer_norm_eps, false);
    dec_ln_emb_ = LayerNorm::bind(w, "model.decoder.layernorm_embedding", D, c.layer_norm_eps, false);
    embed_scale_ = c.scale_embedding ? std::sqrt(static_cast<double>(D)) : 1.0;
    const auto act = activation_from_string(c.activation);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));

    auto attention = [&](const std::string& p) {
      SelfAttention a;
      a.q = Linear::bind(w, p + "q_proj", c.inner_dim(), D, true);
      a.k = Linear::bind(w, p + "k_proj", c.inner_dim(), D, true);
      a.v = Linear::bind(w, p + "v_proj", c.inner_dim(), D, true);
      a.o = Linear::bind(w, p + "out_proj", D, c.inner_dim(), true);
      a.heads = c.num_heads;
      a.scale = scale;
      return a;
    };
    auto ffn = [&](const std::string& p) {
      FeedForward f;
      f.in = Linear::bind(w, p + "fc1", c.d_ff, D, true);
      f.out = Linear::bind(w, p + "fc2", D, c.d_ff, true);
      f.act = act;
      return f;
    };
    for (int64_t i = 0; i < c.encoder_layers; ++i) {
      const auto p = "model.encoder.layers." + std::to_string(i) + ".";
      BartEncoderLayer l;
      l.self_attn = attention(p + "self_attn.");
      l.self_attn.bf16_attention = pack;
      l.self_attn.kernel_attention = true;
      l.self_attn_norm = LayerNorm::bind(w, p + "self_attn_layer_norm", D, c.layer_norm_eps, false);
      l.ffn = ffn(p);
      l.final_norm = LayerNorm::bind(w, p + "final_layer_norm", D, c.layer_norm_eps, false);
      encoder_.push_back(std::move(l));
    }
    for (int64_t i = 0; i < c.decoder_layers; ++i) {
      const auto p = "model.decoder.layers." + std::to_string(i) + ".";
      BartDecoderLayer l;
      l.self_attn = attention(p + "self_attn.");
      l.self_attn_norm = LayerNorm::bind(w, p + "self_attn_layer_norm", D, c.layer_norm_eps, false);
      const auto x = attention(p + "encoder_attn.");
      CrossAttention ca = make_cross_attention(x, w, p + "encoder_attn.", c, options, i);
      l.cross_attn_norm = LayerNorm::bind(w, p + "encoder_attn_layer_norm", D, c.layer_norm_eps, false);
      l.ffn = ffn(p);
      l.final_norm = LayerNorm::bind(w, p + "final_layer_norm", D, c.layer_norm_eps, false);
      cross_.push_back(std::move(ca));
      decoder_.push_back(std::move(l));
    }
    finish_projections(encoder_, decoder_, cross_, lm_head_, shared_, options);
    binder.finish();
    params_ = w.take_params();
  }

  // Differentiable (training); inference callers hold a no-grad or inference-mode guard.
  EncoderOutput encode_batch(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                             const EncodeStop& stop) override {
    check_tokens(input_ids, "input_ids");
    const auto ids = input_ids.to(device_, torch::kLong);
    const int64_t k = ids.size(1);
    if (k > config_.max_position_embeddings) {
      throw std::out_of_range("input of " + std::to_string(k) + " tokens exceeds this BART model's " +
                              std::to_string(config_.max_position_embeddings) + " positions; truncate it");
    }
    const auto mask = mask_of(attention_mask, ids);
    auto h = torch::embedding(shared_, ids) * embed_scale_ + enc_pos_.narrow(0, 2, k).unsqueeze(0);
    h = dropout(enc_ln_emb_(h), DropoutSite::kHidden);
    const auto bias = additive_mask(mask.view({ids.size(0), 1, 1, k}), compute_dtype_);
    for (const auto& l : encoder_) {
      stop_if_asked(stop);
      h = l.self_attn_norm(h + dropout(l.self_attn.forward(h, bias), DropoutSite::kHidden));
      stop_if_asked(stop);
      h = clamp_fp16_overflow(l.final_norm(h + dropout(l.ffn(h), DropoutSite::kHidden)));  // as BartEncoderLayer
    }
    return {h, mask};
  }

  torch::Tensor run_decoder(const torch::Tensor& tokens, DecodeContext& ctx) override {
    const auto& pos = ctx.query_positions();
    const int64_t max_pos = config_.max_position_embeddings;
    if (ctx.highest_position() >= max_pos) {
      throw std::out_of_range("decoder position exceeds this BART model's " + std::to_string(max_pos) +
                              " positions; lower max_new_tokens");
    }
    auto h = torch::embedding(shared_, tokens) * embed_scale_ + torch::embedding(dec_pos_, pos + 2);
    h = dropout(dec_ln_emb_(h), DropoutSite::kHidden);
    const auto bias = additive_mask(ctx.self_allowed().unsqueeze(1), compute_dtype_);
    for (size_t i = 0; i < decoder_.size(); ++i) {
      const auto& l = decoder_[i];
      h = l.self_attn_norm(h + dropout(ctx.self_attention(i, l.self_attn, h, bias), DropoutSite::kHidden));
      h = l.cross_attn_norm(h + dropout(ctx.cross_attention(i, cross_[i], h), DropoutSite::kHidden));
      h = l.final_norm(h + dropout(l.ffn(h), DropoutSite::kHidden));
    }
    return (lm_head_(h) + final_logits_bias_).to(torch::kFloat32);
  }

  const std::vector<CrossAttention>& cross_layers() const override { return cross_; }

 private:
  torch::Tensor shared_, final_logits_bias_, enc_pos_, dec_pos_;
  Linear lm_head_;  // the shared embedding when tied
  LayerNorm enc_ln_emb_, dec_ln_emb_;
  double embed_scale_ = 1.0;
  std::vector<BartEncoderLayer> encoder_;
  std::vector<BartDecoderLayer> decoder_;
  std::vector<CrossAttention> cross_;
};

}  // namespace

std::unique_ptr<EncoderDecoderModel> load_bart(const ModelConfig& config, const CheckpointReader& ckpt,
                                               const LoadOptions& options) {
  return std::make_unique<BartModel>(config, ckpt, options);
}

}  // namespace srformer
