#pragma once
// Per-row decoder state for a batch of independent sequences. Every tensor has the row as its
// first dimension, so that rows can be selected (leave/reorder) and appended (join) in one op each.
#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace srformer {

struct LayerState {
  // Self-attention cache: [B, H, T, d]. Slots are shared across rows; a row's valid slots are
  // marked in DecoderState::self_valid (rows that joined later have invalid leading slots).
  torch::Tensor self_k, self_v;
  // Cross-attention keys/values over the encoder output: [B, H, k, d] (padded to the batch's max k);
  // in a layer that keeps them in pools (cross_start below) head-major [H, N, d] pools.
  torch::Tensor cross_k, cross_v;
  // SRformer (fp32): K^T V [B,H,d,d] (clamped for BART; undefined with a switch table, which holds
  // all the switches need of it), ||K|| [B,H,d], membrane [B,H,d,d], current recurrent term R
  // [B,H,d,d]. Undefined for variants without RAF.
  torch::Tensor kv, knorm, mem, recur;
  // SRformer, precomputed: what each segment switch of the row's schedule feeds the membrane
  // (P_i Wᵀ), in switch order: a pool [E, H, d, d] fp32 of every request's entries (drive_start).
  torch::Tensor switch_drive;
  // LongT5-style global tokens: mean-pooled K/V per segment [B, H, m, d]; undefined otherwise.
  torch::Tensor global_k, global_v;
  // Segmented softmax variants, incremental decoding: the keys/values of the segment window each
  // row read at its last step, [B, H, W, d] (W = s, 2s for xl). Gathered again only for rows whose
  // segment changed, so a step does not copy W keys per row and layer from cross_k/cross_v.
  // Undefined where the step reads each window in place (CPU fp32 with the kernels on,
  // kernels::window_attention), which needs no copies.
  torch::Tensor window_k, window_v;
  // Where each row's keys/values and switch table lie in incremental decoding of the segmented
  // variants (and of full attention where the CPU kernels read it in place): cross_k/cross_v are then
  // head-major pools [H, N, d] (a head's keys contiguous, with room per head for more) holding each
  // request's real positions, k_b of them, from cross_start[b] on
  // ([B] int64), and switch_drive a pool of entries, the row's from drive_start[b] on ([B] int64; its
  // schedule's length, segments.h visited_segments). A request's span is written once, when it joins,
  // and never changed: beams share it, a leaving request's span becomes a hole the next joins fill,
  // and no request is padded to another's length (a T5-small row is 24 KB per encoder position: a
  // 4k-token document among short ones padded each of them to ~100 MB). Undefined: cross_k/cross_v
  // are dense rows [B, H, k, d] (full attention through LibTorch, which reads them every step).
  torch::Tensor cross_start, drive_start;
};

class DecoderState {
 public:
  std::vector<LayerState> layers;
  torch::Tensor self_valid;        // [B, T] bool: slot holds a real past token of this row
  torch::Tensor self_pos;          // [B, T] int64: decoder position of each slot (T5 relative bias)
  torch::Tensor cross_valid;       // [B, k] bool: key is a real encoder position
  torch::Tensor enc_len;           // [B] int64: real encoder length k_b
  torch::Tensor step;              // [B] int64: t, the position of the next token
  torch::Tensor expected_len;      // [B] int64: L (segment schedule)
  torch::Tensor max_steps;         // [B] int64: the row's most steps (max_new_tokens), its switch table's reach
  torch::Tensor num_segments;      // [B] int64: m_b = ceil(k_b / s) (1 for full attention)
  torch::Tensor segment;           // [B] int64: segment used at the last step (-1 before the first)
  torch::Tensor raf_fired;         // [B, layers] float64: membrane elements that fired, summed over RAF steps
  torch::Tensor raf_total;         // [B] float64: membrane elements updated per layer, summed over RAF steps
  torch::Tensor segment_switches;  // [B] int64: RAF steps taken
  // Where each row's self-attention slots lie: [B, T] int32, slot t of row b in row self_src[b, t] of
  // every layer's self_k / self_v. Beams of one request share the slots they have in common: when a
  // beam takes another parent only this table changes (a step writes each row's new slot into its own
  // row, and a slot, once written, never changes), where moving the caches cost ~12% of a T5-small
  // beam step. Rows are copied into their own caches only when rows they read move or leave.
  // Undefined: row b's slots are in row b (a model whose step reads the caches directly). Set by
  // models that read through it (EncoderDecoderModel on the CPU, kernels::slot_attention).
  torch::Tensor self_src;

  int64_t batch_size() const { return step.defined() ? step.size(0) : 0; }

  // Bounds the memory the state keeps allocated (held_bytes) to `bytes` where its rows' own use
  // (bytes) allows; 0 (the default): no bound. Buffers that grow for a join take room for more rows or
  // positions only from what is left under the bound (each in proportion to its size; none once it is
  // reached), and when rows leave or join and the state still holds more than the bound, it gives
  // room and holes back (a copy of what is in use; where the rows alone use more than the bound, once
  // room and holes are an eighth of what it holds). A budget that
  // counts what requests use then also bounds what the process holds for them, but for the moment a
  // buffer grows, when the old and the new one both exist.
  void set_held_limit(int64_t bytes) { held_limit_ = bytes; }
  int64_t held_limit() const { return held_limit_; }
  // Drops every row; keeps the bound.
  void clear();

  // Keeps rows `rows` (int64 [N], indices into the current rows, repeats allowed) in that order.
  // Pools (LayerState::cross_start) are not copied: rows keep pointing at their spans; once at most a
  // quarter of a pool is in use, the spans in use are copied densely and the memory given back.
  void select(const torch::Tensor& rows);
  // Appends the rows of `other` after this state's rows (pads self slots, masks and dense cross keys
  // as needed); other's pooled spans are written into holes of this state's pools (first fit), those
  // that fit none at their end. A pool that must grow for them moves to a buffer with room that holds
  // the spans in use densely: its holes do not survive growth. Into an empty state: other's rows, and
  // this state's bound.
  void append(DecoderState&& other);
  // Drops leading self-attention slots that no row uses any more, when there are at least
  // min_unused of them (each compaction moves the used slots of every self-attention cache: within
  // its buffer where the state alone holds it, into a dense copy otherwise).
  void compact(int64_t min_unused = 1);
  // After a decode step: keeps `rows` (indices into the current rows, in order, repeats allowed) like
  // select(), from plain integers. Does nothing when they are 0..B-1. Rows that change (leaving
  // rows, the last rows moving into their holes, beams swapping or repeating parents) are copied
  // within the storage on the CPU when no other state shares the tensors; other rows stay. When
  // rows were dropped, compacts once a quarter of the self-attention slots (at least 8) is unused:
  // masked slots cost the attention little, a copy of every cache per leaving request costs more.
  // `same_request` (empty, or one entry per kept row): true where the row moving to j is a beam of
  // the request whose row was at j. Beams of one request differ only in their self-attention caches
  // (the step, segment schedule, RAF membrane, windows and slots follow the request's input and step
  // count, not its tokens), so for those rows only the caches move: a beam step then copies ~40%
  // of the state bytes a full row move would (BART-base, srformer). With self_src, not even those:
  // such a row takes its parent's row of the slot table instead.
  void retain(const std::vector<int64_t>& rows, const std::vector<bool>& same_request = {});
  // Bytes held for the request whose `rows` rows (beams, samples; their most) start at first_row: each
  // row's share of the [B, ...] tensors (their padding to the batch's longest included, which the batch
  // really holds for it), and its own spans of the pools once (its rows share them); not a share of
  // other requests' spans. And the bytes of the whole state: a pool counts the spans some row uses
  // (holes wait for the next join; at most three times what is used).
  int64_t request_bytes(int64_t first_row, int64_t rows) const;
  int64_t bytes() const;
  // The memory the state's tensors keep allocated, each buffer once: bytes() plus the room kept for
  // growth (self-attention caches and rows appended into buffers with room, pools' heads) and the
  // pools' holes. bytes() is what the rows use, and what budgets count; this is what the process holds.
  int64_t held_bytes() const;
  // Layer `layer`'s cross keys, values, switch table and self-attention caches of each row in row
  // order ([B, ...], keys [B, H, k, d] and tables [B, n, H, d, d] zero-padded to the longest): a copy
  // when the layer keeps them in pools (or rows share self slots), the tensors themselves otherwise.
  // For checks and tools.
  LayerState rows_of_layer(size_t layer) const;

 private:
  int64_t held_limit_ = 0;
  // Becomes `rows` (its rows and buffers), keeping this state's bound.
  void take_rows(DecoderState&& rows);
  // Share of room (0..1: none to as much again) buffers grown for joining `other` take (set_held_limit).
  double join_room(const DecoderState& other) const;
  // Gives back room and holes when the state holds more than its bound (set_held_limit).
  void keep_within_limit();
  // After rows left: once the remaining rows need at most half of the encoder positions the batch is
  // padded to (a long input left), cuts cross_valid and dense cross_k/cross_v to what they need (a
  // copy of what is kept). Without it a long document that came and went would leave every later
  // full-attention row padded to its length while the batch ran: ~400 MB a T5-small row at 16k.
  void trim_padding();
  // After rows left or moved: gives back the pools' room once at most a quarter is in use.
  void release_pools();
  // Copies the self-attention slots that rows `which` (indices into the current rows) read from other
  // rows into their own rows, and points their self_src entries at themselves.
  void own_self_slots(const std::vector<int64_t>& which);
  // retain()'s part for self_src: returns, per kept row, whether its caches stay where they are (it
  // is a beam of the request whose row was there, and the slots it reads do not move); own_self_slots
  // for rows whose slots must move; sets self_src for the kept rows. Empty: every cache row moves.
  std::vector<bool> share_beam_slots(const std::vector<int64_t>& rows, const std::vector<bool>& same_request,
                                     bool caches_in_place);
};

}  // namespace srformer
