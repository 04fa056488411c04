#pragma once
// What a row of decoder state costs before it exists: the bytes each of DecoderState's tensors holds
// per row, by what it grows with. A server budgets memory with it (DecoderState::bytes measures a
// state that exists). Every row of a batch is padded to the batch's longest input (its mask, and the
// keys/values of full attention) and output; pooled keys/values and switch tables hold each request's
// own (LayerState::cross_start).
#include <cstdint>

namespace srformer {

// A batch's extent, as StateFootprint::bytes counts it.
struct StateShape {
  int64_t requests = 0;
  int64_t rows = 0;               // beams count
  int64_t encoder_positions = 0;  // the longest input
  int64_t switches = 0;           // the longest schedule's switch-table entries
  int64_t decoder_positions = 0;  // the longest output (self-attention slots)
  int64_t request_positions = 0;  // Σ over requests of their own input positions
  int64_t request_switches = 0;   // Σ over requests of their own schedules' entries
};

struct StateFootprint {
  // A request's input part: cross keys/values per input position, SRformer's switch table per entry
  // (segment switch of the schedule). Held once per request at its own length where its beams share
  // it (the variants that pool them, LayerState::cross_start), else once per row at the longest.
  int64_t per_encoder_position = 0;
  int64_t per_switch = 0;
  bool inputs_shared_by_beams = false;
  // Per row: what follows the input's length (its mask, global tokens), the self-attention caches per
  // generated token, and the rest (membrane, recurrent term, ||K||, segment windows, counters).
  int64_t per_row_encoder_position = 0;
  int64_t per_decoder_position = 0;
  int64_t fixed = 0;
  int64_t segment_size = 0;  // of the switch table's schedule; 0 when there is no table

  StateFootprint& operator+=(const StateFootprint& other);

  // Switch-table entries of a row with `input_tokens` positions and expected length L that takes at
  // most `max_steps` steps (its max_new_tokens): the segments those steps of its schedule visit,
  // min(m, L + 1, max_steps) at most (m = ceil(input_tokens / segment_size)); 0 without a table.
  int64_t switches(int64_t input_tokens, int64_t expected_length, int64_t max_steps) const;

  // A batch of that shape (self-attention caches counted with the room they grow with,
  // self_attention.h: an upper bound; a cache a state operation made dense holds less).
  int64_t bytes(const StateShape& shape) const;
  // One request alone: `rows` beams, `input_tokens` positions, `switches` entries, `decoder_positions` slots.
  int64_t request_bytes(int64_t rows, int64_t input_tokens, int64_t switches, int64_t decoder_positions) const;
};

}  // namespace srformer
