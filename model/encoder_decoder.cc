#include "model/encoder_decoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "model/attention/segments.h"
#include "model/io/load_error.h"
#include "model/io/page_release.h"
#include "model/kernels/avx2.h"
#include "model/kernels/fp32_packed_linear.h"
#include "model/length_groups.h"

namespace srformer {

DecodeContext::DecodeContext(const EncoderOutput& enc, std::vector<LayerState>& layers, torch::Tensor enc_len,
                             torch::Tensor m, torch::Tensor seg, torch::Tensor changed)
    : layers_(&layers),
      enc_mask_(enc.mask),
      enc_len_(std::move(enc_len)),
      m_(std::move(m)),
      seg_(std::move(seg)),
      changed_(std::move(changed)) {
  const int64_t B = seg_.size(0);
  const int64_t q = seg_.size(1);
  highest_position_ = q - 1;
  const auto pos = torch::arange(q, seg_.options());
  query_pos_ = pos.view({1, q}).expand({B, q});
  relative_ = (pos.view({1, 1, q}) - pos.view({1, q, 1})).expand({B, q, q});
  self_allowed_ = relative_.le(0);
  fired_.assign(layers.size(), torch::zeros({B}, seg_.options().dtype(torch::kFloat64)));
}

DecodeContext::DecodeContext(DecoderState& state, torch::Tensor seg, torch::Tensor changed_rows,
                             int64_t highest_position)
    : state_(&state),
      enc_mask_(state.cross_valid),
      enc_len_(state.enc_len),
      m_(state.num_segments),
      seg_(std::move(seg)),
      changed_(std::move(changed_rows)),
      highest_position_(highest_position) {
  const int64_t B = state.batch_size();
  query_pos_ = state.step.view({B, 1});
  relative_ = (state.self_pos - query_pos_).unsqueeze(1);  // [B,1,T]
  self_allowed_ = state.self_valid.unsqueeze(1);
  fired_.assign(state.layers.size(), torch::zeros({B}, seg_.options().dtype(torch::kFloat64)));
}

torch::Tensor DecodeContext::self_attention(size_t layer, const SelfAttention& attn, const torch::Tensor& x,
                                            const torch::Tensor& bias) {
  if (!incremental()) return attn.forward(x, bias);
  auto& ls = state_->layers[layer];
  return attn.step(x, ls.self_k, ls.self_v, bias, state_->self_src);
}

torch::Tensor DecodeContext::cross_attention(size_t layer, const CrossAttention& attn, const torch::Tensor& x) {
  if (!incremental()) {
    return attn.forward(x, (*layers_)[layer], enc_mask_, enc_len_, m_, seg_, changed_, &fired_[layer]);
  }
  return attn.step(x, state_->layers[layer], enc_mask_, enc_len_, m_, seg_, changed_, state_->segment_switches,
                   &fired_[layer]);
}

namespace {

// What the host needs of a step, read from the model's device in one copy before any layer runs: the
// rows whose segment changes (as indices back on the device, for the layers' index_select) and the
// highest decoder position. On a GPU each read waits for the queue; here it holds a few small kernels,
// where a read in each layer would stall it mid-step. Also checks the schedule's invariant that a
// changed row has a switch-table entry left (on a GPU a read past the table faults the device).
struct StepPlan {
  torch::Tensor changed_rows;
  int64_t highest_position = 0;
};

StepPlan plan_step(const DecoderState& st, const torch::Tensor& changed) {
  const int64_t B = changed.size(0);
  const auto host = torch::stack({changed.to(torch::kLong), st.step, st.segment_switches, st.num_segments,
                                  st.expected_len, st.max_steps})
                        .to(torch::kCPU, torch::kLong)
                        .contiguous();
  const int64_t* is_changed = host.data_ptr<int64_t>();
  const int64_t* step = is_changed + B;
  const int64_t* switches = step + B;
  const int64_t* m = switches + B;
  const int64_t* L = m + B;
  const int64_t* max_steps = L + B;
  StepPlan plan;
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < B; ++b) {
    plan.highest_position = std::max(plan.highest_position, step[b]);
    if (is_changed[b] == 0) continue;
    if (switches[b] < 0 || switches[b] >= visited_segment_count(m[b], std::max<int64_t>(1, L[b]), max_steps[b])) {
      throw std::logic_error(
          "step: row " + std::to_string(b) + " switched segments more often than its schedule (" +
          std::to_string(switches[b]) + " switches, m=" + std::to_string(m[b]) + ", L=" + std::to_string(L[b]) +
          (max_steps[b] == kUnboundedSteps ? "" : ", at most " + std::to_string(max_steps[b]) + " steps") + ")");
    }
    rows.push_back(b);
  }
  plan.changed_rows = torch::tensor(rows, torch::kLong).to(changed.device());
  return plan;
}

// length_groups() of a right-padded batch's rows; empty where one call over the padded batch is the way:
// a mask that is not each row's real tokens followed by padding, or an empty row.
std::vector<std::vector<int64_t>> row_groups(const torch::Tensor& mask) {
  const int64_t k = mask.size(1);
  const auto lengths = mask.sum(1).to(torch::kInt64).contiguous();
  if (!torch::equal(torch::arange(k).unsqueeze(0) < lengths.unsqueeze(1), mask)) return {};
  const std::vector<int64_t> length(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + lengths.numel());
  if (*std::min_element(length.begin(), length.end()) == 0) return {};
  return length_groups(length);
}

}  // namespace

EncoderOutput EncoderDecoderModel::encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                          const EncodeStop& stop) {
  const bool may_group = device_.is_cpu() && !torch::GradMode::is_enabled() && input_ids.dim() == 2 &&
                         input_ids.size(0) > 1 && attention_mask.defined() &&
                         attention_mask.sizes() == input_ids.sizes();
  if (!may_group) return encode_batch(input_ids, attention_mask, stop);
  const auto mask = attention_mask.to(torch::kCPU).ne(0);
  const auto groups = row_groups(mask);
  if (groups.size() < 2) return encode_batch(input_ids, attention_mask, stop);
  const auto lengths = mask.sum(1);
  EncoderOutput out;
  for (const auto& rows : groups) {
    const auto index = torch::tensor(rows, torch::kInt64);
    const int64_t longest = lengths[rows.front()].item<int64_t>();
    const auto part = encode_batch(input_ids.index_select(0, index).narrow(1, 0, longest),
                                   mask.index_select(0, index).narrow(1, 0, longest), stop);
    if (!out.hidden.defined()) {
      out.hidden = torch::zeros({input_ids.size(0), input_ids.size(1), part.hidden.size(2)}, part.hidden.options());
    }
    out.hidden.narrow(1, 0, longest).index_copy_(0, index.to(part.hidden.device()), part.hidden);
  }
  out.mask = mask.to(device_);
  return out;
}

torch::Tensor EncoderDecoderModel::mask_of(const torch::Tensor& attention_mask, const torch::Tensor& input_ids) const {
  if (!attention_mask.defined()) return torch::ones(input_ids.sizes(), input_ids.options().dtype(torch::kBool));
  if (attention_mask.sizes() != input_ids.sizes()) {
    throw std::invalid_argument("attention_mask shape differs from input_ids shape");
  }
  return attention_mask.to(device_).ne(0);
}

void EncoderDecoderModel::check_tokens(const torch::Tensor& ids, const char* what) const {
  if (ids.dim() != 2) throw std::invalid_argument(std::string(what) + " must be [batch, length]");
  if (ids.numel() == 0) return;
  const auto lo = ids.min().item<int64_t>();
  const auto hi = ids.max().item<int64_t>();
  if (lo < 0 || hi >= config_.vocab_size) {
    throw std::out_of_range(std::string(what) + " holds token id " + std::to_string(lo < 0 ? lo : hi) +
                            " outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
  }
}

DecoderState EncoderDecoderModel::start(const EncoderOutput& enc, const torch::Tensor& expected_length,
                                        const torch::Tensor& max_steps, const EncodeStop& stop) {
  torch::NoGradGuard no_grad;
  const int64_t B = enc.hidden.size(0);
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device_);
  DecoderState st;
  st.cross_valid = enc.mask;
  st.enc_len = enc.mask.sum(1).to(torch::kLong);
  st.num_segments = config_.srformer.segmented() ? num_segments(st.enc_len, config_.srformer.segment_size)
                                                 : torch::ones({B}, long_opts);
  st.expected_len = expected_length.to(long_opts).view({B}).clamp_min(1);
  st.max_steps = max_steps.defined() ? max_steps.to(long_opts).view({B}).clamp_min(1)
                                     : torch::full({B}, kUnboundedSteps, long_opts);
  st.step = torch::zeros({B}, long_opts);
  st.segment = torch::full({B}, -1, long_opts);
  st.segment_switches = torch::zeros({B}, long_opts);
  st.raf_fired = torch::zeros({B, config_.decoder_layers}, long_opts.dtype(torch::kFloat64));
  st.raf_total = torch::zeros({B}, long_opts.dtype(torch::kFloat64));
  st.self_valid = torch::zeros({B, 0}, long_opts.dtype(torch::kBool));
  st.self_pos = torch::zeros({B, 0}, long_opts);
  const auto& cross = cross_layers();
  st.layers.resize(cross.size());
  // A long input's cross keys and values are projected in pieces when the caller pauses (set_pieces).
  const int64_t positions = stop ? piece_share(piece_positions_, B) : std::numeric_limits<int64_t>::max();
  const auto pause = [&stop] { stop_if_asked(stop); };
  for (size_t l = 0; l < cross.size(); ++l) {
    stop_if_asked(stop);
    auto& ls = st.layers[l];
    cross[l].prepare(enc.hidden, enc.mask, st.num_segments, ls, st.expected_len, st.max_steps, positions, pause);
    ls.self_k = torch::zeros({B, config_.num_heads, 0, config_.head_dim}, enc.hidden.options());
    ls.self_v = torch::zeros_like(ls.self_k);
  }
  // Beams share self-attention slots where the step reads them with the CPU kernel (DecoderState::self_src).
  if (device_.is_cpu() && enc.hidden.scalar_type() == torch::kFloat32 && kernels::use_cpu_kernels()) {
    st.self_src = torch::zeros({B, 0}, torch::kInt32);
  }
  return st;
}

StateFootprint EncoderDecoderModel::state_footprint() const {
  StateFootprint f;
  for (const auto& cross : cross_layers()) f += cross.footprint(device_, compute_dtype_);  // K/V are activations
  const auto element = static_cast<int64_t>(c10::elementSize(compute_dtype_));
  // Self-attention K and V per layer; self_valid, self_pos and self_src per slot; cross_valid per position;
  // the row's step, lengths (k, L, m and its step bound), segment and RAF counters.
  f.per_decoder_position += config_.decoder_layers * 2 * config_.num_heads * config_.head_dim * element + 1 + 8 + 4;
  f.per_row_encoder_position += 1;
  f.fixed += 8 * 8 + config_.decoder_layers * 8;
  return f;
}

torch::Tensor EncoderDecoderModel::step(DecoderState& st, const torch::Tensor& tokens) {
  torch::NoGradGuard no_grad;
  const int64_t B = st.batch_size();
  if (tokens.dim() != 1 || tokens.size(0) != B) {
    throw std::invalid_argument("step: tokens must be [" + std::to_string(B) + "], one per row");
  }
  if (B == 0) return torch::zeros({0, config_.vocab_size}, torch::TensorOptions().device(device_));
  // Checked where the caller holds them: on the host, no wait for the GPU (the engine passes host tokens).
  check_tokens(tokens.view({B, 1}), "step tokens");
  const auto tok = tokens.to(device_, torch::kLong).view({B, 1});
  const auto seg = config_.srformer.segmented() ? segment_schedule(st.step, st.num_segments, st.expected_len)
                                                : torch::zeros_like(st.step);
  const auto changed = seg.ne(st.segment);
  const StepPlan plan = plan_step(st, changed);
  // The new position occupies a new slot (right-aligned: every row writes the same last slot).
  st.self_valid = torch::cat({st.self_valid, torch::ones({B, 1}, st.self_valid.options())}, 1);
  st.self_pos = torch::cat({st.self_pos, st.step.view({B, 1})}, 1);
  if (st.self_src.defined()) st.self_src = torch::cat({st.self_src, torch::arange(B, torch::kInt32).view({B, 1})}, 1);
  DecodeContext ctx(st, seg, plan.changed_rows, plan.highest_position);
  auto logits = run_decoder(tok, ctx).select(1, 0);
  if (config_.srformer.uses_raf() || config_.srformer.cross_attention == CrossAttentionKind::kAblationIII) {
    st.raf_fired = st.raf_fired + torch::stack(ctx.fired(), 1);
    st.raf_total = st.raf_total + changed.to(torch::kFloat64) *
                                      static_cast<double>(config_.num_heads * config_.head_dim * config_.head_dim);
  }
  if (config_.srformer.segmented()) st.segment_switches = st.segment_switches + changed.to(torch::kLong);
  st.segment = seg;
  st.step = st.step + 1;
  return logits;
}

torch::Tensor EncoderDecoderModel::forward(const EncoderOutput& enc, const torch::Tensor& decoder_input_ids,
                                           const std::optional<torch::Tensor>& expected_length) {
  check_tokens(decoder_input_ids, "decoder_input_ids");
  const auto ids = decoder_input_ids.to(device_, torch::kLong);
  const int64_t B = ids.size(0);
  const int64_t q = ids.size(1);
  // Said here: LibTorch failed on these part-way, with messages about its own shapes.
  if (q == 0) {
    throw std::invalid_argument(
        "decoder_input_ids holds no positions; a teacher-forced forward needs at least one (the decoder start "
        "token)");
  }
  if (B != enc.hidden.size(0)) {
    throw std::invalid_argument("decoder_input_ids has " + std::to_string(B) + " rows but the encoder output " +
                                std::to_string(enc.hidden.size(0)));
  }
  if (expected_length && expected_length->numel() != B) {
    throw std::invalid_argument("expected_length holds " + std::to_string(expected_length->numel()) + " values for " +
                                std::to_string(B) + " rows");
  }
  const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(device_);
  const auto enc_len = enc.mask.sum(1).to(torch::kLong);
  const auto m =
      config_.srformer.segmented() ? num_segments(enc_len, config_.srformer.segment_size) : torch::ones({B}, long_opts);
  const auto L =
      expected_length ? expected_length->to(long_opts).view({B}).clamp_min(1) : torch::full({B}, q, long_opts);
  const auto t = torch::arange(q, long_opts).view({1, q});
  const auto seg = config_.srformer.segmented() ? segment_schedule(t, m.view({B, 1}), L.view({B, 1}))
                                                : torch::zeros({B, q}, long_opts);
  const auto prev = torch::cat({torch::full({B, 1}, -1, long_opts), seg.narrow(1, 0, q - 1)}, 1);
  const auto changed = seg.ne(prev);
  std::vector<LayerState> layers(cross_layers().size());
  for (size_t l = 0; l < layers.size(); ++l) cross_layers()[l].prepare(enc.hidden, enc.mask, m, layers[l]);
  DecodeContext ctx(enc, layers, enc_len, m, seg, changed);
  return run_decoder(ids, ctx);
}

void EncoderDecoderModel::set_pieces(const LoadOptions& options) {
  if (!kernels::env_not_zero("SRFORMER_ENCODE_PIECES")) return;
  piece_scores_ = std::max<int64_t>(1, options.encode_piece_scores);
  piece_positions_ = std::max<int64_t>(1, options.encode_piece_positions);
}

bool EncoderDecoderModel::set_precision(const LoadOptions& options) {
  device_ = options.device;
  dtype_ = options.dtype;
  const bool cpu_bf16 = device_.is_cpu() && dtype_ == torch::kBFloat16;
  compute_dtype_ = cpu_bf16 ? torch::kFloat32 : dtype_;
  return cpu_bf16;
}

bool EncoderDecoderModel::packs_projections(const LoadOptions& options) const {
  // Not with the kernels off (SRFORMER_CPU_KERNELS=0): LibTorch's path reads the row-major weights.
  return options.pack_projections && device_.is_cpu() && dtype_ == torch::kFloat32 && kernels::use_cpu_kernels() &&
         kernels::fp32_packed_available();
}

void EncoderDecoderModel::pack(Linear& l, bool release_row_major) {
  l.pack_fp32();
  if (release_row_major && l.packed_fp32 && l.weight.is_contiguous())
    release_pages(l.weight.data_ptr(), l.weight.nbytes());
}

int64_t EncoderDecoderModel::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : params_) n += t.numel();
  return n;
}

namespace {

// `text` as a regular expression that matches exactly it (parameter names hold dots).
std::string regex_literal(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (std::string_view("\\^$.|?*+()[]{}").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

RafParams bind_raf(ParamBinder& w, const std::string& prefix, int64_t head_dim, const SrformerConfig& cfg,
                   uint64_t seed) {
  RafParams p;
  p.weight = w.take_raf(prefix + "SNN_kv.weight", {head_dim, head_dim}, [&] {
    // nn.Linear default: kaiming_uniform(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)), times the config's scale.
    auto gen = at::detail::createCPUGenerator(seed);
    const double bound = cfg.raf_init_weight_scale / std::sqrt(static_cast<double>(head_dim));
    return torch::empty({head_dim, head_dim}, torch::kFloat32).uniform_(-bound, bound, gen);
  });
  p.threshold = w.take_raf(prefix + "threshold", {1}, [&] { return torch::full({1}, cfg.raf_init_threshold); });
  p.leak = w.take_raf(prefix + "leak", {1}, [&] { return torch::full({1}, cfg.raf_init_leak); });
  return p;
}

}  // namespace

EmbeddingAndHead bind_embedding_and_head(ParamBinder& w, ModelConfig& c, const std::string& name,
                                         const std::vector<std::string>& aliases, bool pack) {
  EmbeddingAndHead out;
  // A tied head is the embedding itself, so a checkpoint that kept it under lm_head.weight alone (a
  // deduplication that keeps the first name in sorted order) holds it there; Hugging Face ties the two
  // before it loads and so fills both from it.
  auto names = aliases;
  if (c.tie_word_embeddings) names.push_back("lm_head.weight");
  out.embedding = w.take(name, {c.vocab_size, c.d_model}, names);
  // Stored besides `name`, they are its tied copies: transformers 5 unties them where the config does not
  // tie word embeddings, and a fine-tune can then change them apart. The model has one embedding, so such a
  // checkpoint would compute something else than it was trained to: refused, naming the tensors.
  std::vector<std::string> untied;
  for (const auto& alias : aliases) {
    const auto stored = w.raw().take_optional(alias, {c.vocab_size, c.d_model});
    if (stored && !stored->is_same(out.embedding) && !torch::equal(*stored, out.embedding)) untied.push_back(alias);
  }
  if (!untied.empty()) {
    std::string listed;
    for (const auto& alias : untied) listed += (listed.empty() ? "" : ", ") + alias;
    throw LoadError(listed + (untied.size() == 1 ? " differs" : " differ") + " from " + name +
                    ": the checkpoint's token embeddings are untied, but this model has one embedding for the "
                    "encoder and the decoder, and loading would replace them by " +
                    name + ". Save the model with them tied (the same tensor under every name) to serve it here.");
  }
  if (c.tie_word_embeddings) {
    // transformers 5 writes tie_word_embeddings: true for every T5 (scale_decoder_outputs says what it
    // meant) and keeps a checkpoint's own lm_head.weight over the tie: a stored head other than the
    // embedding is the head. Equal to it (tied weights saved under every name), it is the embedding.
    const auto stored = w.raw().take_optional("lm_head.weight", {c.vocab_size, c.d_model});
    if (stored && !stored->is_same(out.embedding) && !torch::equal(*stored, out.embedding)) {
      c.scale_decoder_outputs = c.scales_decoder_outputs();
      c.tie_word_embeddings = false;
      out.lm_head.weight = w.record("lm_head.weight", *stored);
    } else {
      out.lm_head.weight = out.embedding;
    }
  } else {
    out.lm_head.weight = w.take("lm_head.weight", {c.vocab_size, c.d_model});
  }
  if (pack) out.lm_head.pack_bf16();
  return out;
}

CrossAttention make_cross_attention(const SelfAttention& projections, ParamBinder& w, const std::string& prefix,
                                    const ModelConfig& c, const LoadOptions& options, int64_t layer) {
  CrossAttention ca;
  ca.q = projections.q;
  ca.k = projections.k;
  ca.v = projections.v;
  ca.o = projections.o;
  ca.heads = projections.heads;
  ca.head_dim = c.head_dim;
  ca.scale = projections.scale;
  ca.kind = c.srformer.cross_attention;
  ca.segment_size = c.srformer.segment_size;
  ca.kv_clamp = c.srformer.kv_clamp;
  ca.precompute_switches = options.precompute_switches;
  if (c.srformer.uses_raf()) {
    ca.raf = bind_raf(w, prefix, c.head_dim, c.srformer, options.seed + static_cast<uint64_t>(layer));
  } else {
    w.raw().ignore(regex_literal(prefix) + "(SNN_kv\\.weight|threshold|leak)");
  }
  return ca;
}

torch::Tensor relative_position_bucket(const torch::Tensor& relative, bool bidirectional, int64_t num_buckets,
                                       int64_t max_distance) {
  auto buckets = torch::zeros_like(relative);
  auto rel = relative;
  if (bidirectional) {
    num_buckets /= 2;
    buckets = buckets + rel.gt(0).to(torch::kLong) * num_buckets;
    rel = rel.abs();
  } else {
    rel = -torch::minimum(rel, torch::zeros_like(rel));
  }
  const int64_t max_exact = num_buckets / 2;
  const auto is_small = rel.lt(max_exact);
  auto large = max_exact + (torch::log(rel.to(torch::kFloat32) / static_cast<float>(max_exact)) /
                            std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                            static_cast<double>(num_buckets - max_exact))
                               .to(torch::kLong);
  large = torch::minimum(large, torch::full_like(large, num_buckets - 1));
  return buckets + torch::where(is_small, rel, large);
}

}  // namespace srformer
