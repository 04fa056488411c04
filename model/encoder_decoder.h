#pragma once
// Shared machinery of BART and T5: the decoder-state life cycle (start / step / teacher-forced
// forward) and the segment schedule. A model only wires its layers, through DecodeContext, which
// hides whether the decoder runs over all positions at once or one cached step.
#include <torch/types.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "model/attention/cross_attention.h"
#include "model/attention/self_attention.h"
#include "model/param_binder.h"
#include "model/seq2seq.h"

namespace srformer {

class DecodeContext {
 public:
  // Teacher-forced over q positions.
  DecodeContext(const EncoderOutput& enc, std::vector<LayerState>& layers, torch::Tensor enc_len, torch::Tensor m,
                torch::Tensor seg, torch::Tensor changed);
  // One step over a batched state (whose self slots already include the new position): changed_rows
  // [n] the rows whose segment changes, highest_position the largest of the state's steps.
  DecodeContext(DecoderState& state, torch::Tensor seg, torch::Tensor changed_rows, int64_t highest_position);

  bool incremental() const { return state_ != nullptr; }
  // Absolute decoder positions of the queries [B,q] (int64), and the highest of them as the host knows it
  // (a model that checks it waits for no device).
  const torch::Tensor& query_positions() const { return query_pos_; }
  int64_t highest_position() const { return highest_position_; }
  // Self-attention: which keys each query may see [B,q,T] and their relative positions (key - query).
  const torch::Tensor& self_allowed() const { return self_allowed_; }
  const torch::Tensor& relative_positions() const { return relative_; }

  torch::Tensor self_attention(size_t layer, const SelfAttention& attn, const torch::Tensor& x,
                               const torch::Tensor& bias);
  torch::Tensor cross_attention(size_t layer, const CrossAttention& attn, const torch::Tensor& x);

  // Fired membrane elements per row, per layer ([B] float64 each).
  const std::vector<torch::Tensor>& fired() const { return fired_; }

 private:
  DecoderState* state_ = nullptr;
  std::vector<LayerState>* layers_ = nullptr;
  // changed_: teacher-forced, [B,q] whether RAF steps at each position; incremental, the changed rows [n].
  torch::Tensor enc_mask_, enc_len_, m_, seg_, changed_;
  torch::Tensor query_pos_, self_allowed_, relative_;
  int64_t highest_position_ = 0;
  std::vector<torch::Tensor> fired_;
};

class EncoderDecoderModel : public Seq2SeqModel {
 public:
  using Seq2SeqModel::encode;
  const ModelConfig& config() const override { return config_; }
  torch::Device device() const override { return device_; }
  torch::ScalarType dtype() const override { return dtype_; }

  // On the CPU without autograd, rows of much different lengths are encoded in groups of similar length
  // (longest first; a row joins a group while it is at least 7/8 as long as the group's longest): every
  // padded position costs as much as a real one, while batching rows of one length gains nothing on the
  // CPU (`srformer bench --only encode`: 8 documents of 96–1024 tokens, 53% padding, 2.4x the time of one
  // call each). Elsewhere (CUDA, training) one call over the padded batch.
  EncoderOutput encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       const EncodeStop& stop) final;
  // The encoder over one padded batch [B, k]: BART's, T5's.
  virtual EncoderOutput encode_batch(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                     const EncodeStop& stop) = 0;

  using Seq2SeqModel::start;
  DecoderState start(const EncoderOutput& enc, const torch::Tensor& expected_length, const torch::Tensor& max_steps,
                     const EncodeStop& stop) override;
  torch::Tensor step(DecoderState& state, const torch::Tensor& tokens) override;
  torch::Tensor forward(const EncoderOutput& enc, const torch::Tensor& decoder_input_ids,
                        const std::optional<torch::Tensor>& expected_length) override;

  // Decoder stack + LM head over tokens [B,q] -> logits [B,q,V] (float32).
  virtual torch::Tensor run_decoder(const torch::Tensor& tokens, DecodeContext& ctx) = 0;
  virtual const std::vector<CrossAttention>& cross_layers() const = 0;
  // Every parameter under its Hugging Face name (tied tensors once), for saving and counting.
  const std::vector<std::pair<std::string, torch::Tensor>>& named_parameters() const override { return params_; }
  StateFootprint state_footprint() const override;
  int64_t parameter_count() const override;
  int64_t packed_weight_bytes() const override { return packed_bytes_; }

 protected:
  ModelConfig config_;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;          // what the user asked for (reported)
  torch::ScalarType compute_dtype_ = torch::kFloat32;  // activations and stored weights
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  int64_t packed_bytes_ = 0;  // finish_projections()
  // The most query-key pairs and positions (over the batch) a piece of a pausable pass covers: encode
  // and start with EncodeStop set (LoadOptions::encode_piece_scores, encode_piece_positions); the
  // int64 maximum, i.e. whole, where SRFORMER_ENCODE_PIECES=0 says so (side-by-side measurements).
  int64_t piece_scores_ = std::numeric_limits<int64_t>::max();
  int64_t piece_positions_ = std::numeric_limits<int64_t>::max();
  void set_pieces(const LoadOptions& options);
  // What a piece covers of each of `units` (rows, or rows × keys) within `budget`: at least one.
  static int64_t piece_share(int64_t budget, int64_t units) {
    return std::max<int64_t>(1, budget / std::max<int64_t>(1, units));
  }

  // Sets device_, dtype_ and compute_dtype_ from the options. bf16 on the CPU computes in fp32 with the
  // projection weights also held in bfloat16 (kernels/bf16_linear.h); returns whether to pack them so.
  bool set_precision(const LoadOptions& options);
  // LoadOptions::pack_projections for an fp32 model on a CPU with AVX2 + FMA: every projection gets its fp32
  // panel form (Linear::pack_fp32): the layers' attention and feed-forward, cross-attention, LM head.
  bool packs_projections(const LoadOptions& options) const;
  // After binding: packs the projections where packs_projections(options) says so, handing the
  // row-major weights' pages back to the kernel (io/page_release.h: inference reads only the packed
  // copy; not a tied LM head's, which is also the embedding table, read every step), and records the
  // bytes of every packed form (fp32 panels, bf16 tiles) for packed_weight_bytes().
  template <typename EncoderLayer, typename DecoderLayer>
  void finish_projections(std::vector<EncoderLayer>& encoder, std::vector<DecoderLayer>& decoder,
                          std::vector<CrossAttention>& cross, Linear& lm_head, const torch::Tensor& embedding,
                          const LoadOptions& options) {
    if (packs_projections(options)) {
      for_each_projection(encoder, decoder, cross, lm_head, [&](Linear& l) {
        pack(l, /*release_row_major=*/&l != &lm_head || !l.weight.is_same(embedding));
      });
    }
    packed_bytes_ = 0;
    for_each_projection(encoder, decoder, cross, lm_head,
                        [this](const Linear& l) { packed_bytes_ += l.packed_bytes(); });
  }
  // f(Linear&) for every projection: the layers' attention and feed-forward, cross-attention, LM head.
  template <typename EncoderLayer, typename DecoderLayer, typename F>
  static void for_each_projection(std::vector<EncoderLayer>& encoder, std::vector<DecoderLayer>& decoder,
                                  std::vector<CrossAttention>& cross, Linear& lm_head, F&& f) {
    const auto layer = [&f](SelfAttention& a, FeedForward& ffn) {
      for (Linear* l : {&a.q, &a.k, &a.v, &a.o, &ffn.in, &ffn.gate, &ffn.out}) {
        if (l->weight.defined()) f(*l);  // ffn.gate only where gated
      }
    };
    for (auto& l : encoder) layer(l.self_attn, l.ffn);
    for (auto& l : decoder) layer(l.self_attn, l.ffn);
    for (auto& ca : cross) {
      for (Linear* l : {&ca.q, &ca.k, &ca.v, &ca.o}) f(*l);
    }
    f(lm_head);
  }
  static void pack(Linear& l, bool release_row_major);

  torch::Tensor mask_of(const torch::Tensor& attention_mask, const torch::Tensor& input_ids) const;
  void check_tokens(const torch::Tensor& ids, const char* what) const;
};

// The shared token embedding, stored under `name` (and, in some checkpoints, also or only under `aliases`,
// or under lm_head.weight where the config ties them), and the LM head: the embedding itself where the
// config ties them, else its own lm_head.weight. A tied config whose checkpoint holds a head that is not
// the embedding (as transformers 5 saves an untied T5) gets that head, and `c` becomes untied with its
// output scaling kept (scale_decoder_outputs), so that the model computes and saves what it read.
struct EmbeddingAndHead {
  torch::Tensor embedding;
  Linear lm_head;
};
EmbeddingAndHead bind_embedding_and_head(ParamBinder& w, ModelConfig& c, const std::string& name,
                                         const std::vector<std::string>& aliases, bool pack);

// Decoder layer `layer`'s cross-attention: its projections (bound as a self-attention's), the config's
// variant, and the RAF parameters under `prefix` (ends in ".") where the variant has them, created with
// the authors' initial values when converting a plain checkpoint (DESIGN.md: SNN_kv is nn.Linear's
// default init). A variant without RAF ignores the unused ones the authors' checkpoints hold.
CrossAttention make_cross_attention(const SelfAttention& projections, ParamBinder& w, const std::string& prefix,
                                    const ModelConfig& c, const LoadOptions& options, int64_t layer);

// T5's relative-position buckets (bidirectional for the encoder, causal for the decoder).
torch::Tensor relative_position_bucket(const torch::Tensor& relative, bool bidirectional, int64_t num_buckets,
                                       int64_t max_distance);

}  // namespace srformer
