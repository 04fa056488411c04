#pragma once
// Encoder-decoder attention with every variant of the paper behind one module (config.h lists
// them): full softmax, segmented softmax over segment i, and SRformer's recurrent term
//   O = softmax(q K_i^T + mask_i) V_i + (q R) / ||K||,   R = RAF(K^T V - K_i^T V_i)
// with ablations and baselines. Each has a teacher-forced form (all decoder positions at once,
// differentiable, for checks and training) and a one-step form (generation) that agree.
#include <torch/types.h>

#include <functional>
#include <limits>
#include <optional>

#include "model/attention/raf.h"
#include "model/config.h"
#include "model/decoder_state.h"
#include "model/layers.h"
#include "model/state_footprint.h"

namespace srformer {

struct CrossAttention {
  Linear q, k, v, o;
  int64_t heads = 0;
  int64_t head_dim = 0;
  double scale = 1.0;  // BART scales the query (and so both terms); T5 does not
  CrossAttentionKind kind = CrossAttentionKind::kFull;
  int64_t segment_size = 0;
  std::optional<double> kv_clamp;
  RafParams raf;  // defined when the variant uses RAF
  // Compute every switch's RAF drive (P_i Wᵀ) when a row starts decoding, so that a segment switch
  // costs an element-wise pass instead of K_iᵀV_i and a d x d product per head (flat step time in k,
  // for min(m, L+1, max_new_tokens) x heads x d x d fp32 more state per row and layer).
  bool precompute_switches = true;

  bool recurrent() const;  // variant has the (q R)/||K|| term

  // Fills the layer's cross K/V (and K^T V, ||K||, zero membrane, global tokens) from the encoder.
  // enc_mask [B,k] bool; m [B] segments per row. With expected_len [B] (L per row, incremental
  // decoding) and precompute_switches, also the table of switch drives in schedule order, for the
  // segments each row's first max_steps [B] steps visit (undefined: its whole schedule). K and V are
  // projected by blocks of `positions` positions, between() called between any two (project_heads).
  void prepare(const torch::Tensor& enc_hidden, const torch::Tensor& enc_mask, const torch::Tensor& m, LayerState& ls,
               const torch::Tensor& expected_len = {}, const torch::Tensor& max_steps = {},
               int64_t positions = std::numeric_limits<int64_t>::max(),
               const std::function<void()>& between = {}) const;

  // Teacher-forced: x [B,q,D]; seg/changed [B,q] (segment per position; whether RAF steps there).
  // fired (optional, [B] float64) accumulates the number of membrane elements that fired.
  torch::Tensor forward(const torch::Tensor& x, const LayerState& ls, const torch::Tensor& enc_mask,
                        const torch::Tensor& enc_len, const torch::Tensor& m, const torch::Tensor& seg,
                        const torch::Tensor& changed, torch::Tensor* fired) const;

  // One step: x [B,1,D]; seg [B]; changed_rows [n] int64, the rows whose segment changed (on x's device:
  // index tensors, never read by the host on a GPU, so a step waits for no kernel); switches [B] segment
  // switches each row took before this step (its entry in the switch table, which the caller keeps
  // within the row's entries: EncoderDecoderModel::step checks it). Updates the membrane and R of the
  // changed rows in ls.
  torch::Tensor step(const torch::Tensor& x, LayerState& ls, const torch::Tensor& enc_mask,
                     const torch::Tensor& enc_len, const torch::Tensor& m, const torch::Tensor& seg,
                     const torch::Tensor& changed_rows, const torch::Tensor& switches, torch::Tensor* fired) const;

  // What prepare() and the steps keep of this layer per row in incremental decoding, with keys and
  // values of `dtype` on `device` (the recurrent state is fp32).
  StateFootprint footprint(const torch::Device& device, torch::ScalarType dtype) const;

 private:
  struct Recurrent {
    torch::Tensor mem, out, fired_count;  // fired_count [n] float64
  };
  // RAF update of n rows whose segment is seg (kv, mem [n,H,d,d]); keys/values hold every row's: dense
  // [R,H,k,d] with `rows` [n] picking the n rows', or pools [N,H,d] with `rows` their spans' starts
  // (LayerState::cross_start).
  Recurrent recurrent_update(const torch::Tensor& kv, const torch::Tensor& keys, const torch::Tensor& values,
                             const torch::Tensor& mem, const torch::Tensor& seg, const torch::Tensor& enc_len,
                             const torch::Tensor& rows) const;
  // What a switch to segment seg feeds the membrane (P_i Wᵀ; K_iᵀV_i Wᵀ for ablation IV), or R
  // itself for ablation III (no RAF); arguments as for recurrent_update. [n,H,d,d] fp32.
  torch::Tensor switch_drive(const torch::Tensor& kv, const torch::Tensor& keys, const torch::Tensor& values,
                             const torch::Tensor& seg, const torch::Tensor& enc_len, const torch::Tensor& rows) const;
  // ls.switch_drive for every row: the drives of the segments its schedule visits, in order, as a
  // pool of every row's entries (and ls.drive_start).
  void switch_table(LayerState& ls, const torch::Tensor& enc_len, const torch::Tensor& m,
                    const torch::Tensor& expected_len, const torch::Tensor& max_steps) const;
  // prepare()'s recurrent part on the CPU with our kernels: ||K||, the switch table, a zero membrane.
  // One pass over each (row, head)'s keys: K^T V is summed from the segments' K_j^T V_j, so it needs
  // no product of its own (and is not kept: only switches read it).
  void prepare_recurrent_cpu(LayerState& ls, const torch::Tensor& enc_len, const torch::Tensor& m,
                             const torch::Tensor& expected_len, const torch::Tensor& max_steps) const;
  // Applies the changed rows' precomputed drives (entry `switches` of each row's table) to ls.
  void apply_switch_table(LayerState& ls, const torch::Tensor& changed_rows, const torch::Tensor& switches,
                          torch::Tensor* fired) const;
  // Teacher-forced recurrent term q R for every position: qf [B,H,q,d] fp32 -> [B,H,q,d] fp32. The
  // RAF recurrence runs over each row's segment switches (not over positions), from drives computed
  // for every segment in one batched product.
  torch::Tensor teacher_forced_recurrence(const torch::Tensor& qf, const LayerState& ls, const torch::Tensor& enc_mask,
                                          const torch::Tensor& seg, const torch::Tensor& changed,
                                          torch::Tensor* fired) const;
  // attn [B,H,q,d] (model dtype), qr = q R [B,H,q,d] fp32 -> the variant's output [B,H,q,d].
  torch::Tensor combine(const torch::Tensor& attn, const torch::Tensor& qr, const LayerState& ls) const;
  bool has_softmax() const;  // false only for ablation I (recurrent term alone)
  // Whether incremental decoding keeps the keys/values in pools (LayerState::cross_start): the
  // segmented variants read them only in windows and at switches; full attention reads every key each
  // step, which the CPU kernels do in place (a row's whole span as one window, head by head), while
  // LibTorch's batched product wants dense rows.
  bool pooled(const torch::Device& device, torch::ScalarType dtype) const;
  // Keys a segmented softmax reads per step: s, or 2s for xl (previous segment too).
  int64_t window_width() const;
  // Gathers the window (rows idx [B,W] of cross K/V; enc_len [B]) of the rows whose segment changed
  // (changed_rows [n]) into ls.window_k/window_v.
  void refresh_windows(LayerState& ls, const torch::Tensor& idx, const torch::Tensor& changed_rows,
                       const torch::Tensor& enc_len) const;
};

// Key/value rows one decoder step of a cross-attention of `kind` with `segment_size` reads per row: k
// (full), s, 2s (xl_memory), s + m (global_tokens) or none (ablation I). From the config, so that the
// server counts the keys its rows read without a layer at hand.
int64_t keys_read_per_step(CrossAttentionKind kind, int64_t segment_size, int64_t enc_len);

}  // namespace srformer
