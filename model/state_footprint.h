#pragma once
// What a row of decoder state costs before it exists: the bytes each of DecoderState's tensors holds
// per row, by what it grows with. A server budgets memory with it (DecoderState::bytes measures a
// state that exists; every row of a batch is padded to the batch's longest input, schedule and output).
#include <cstdint>

namespace srformer {

struct StateFootprint {
  int64_t per_encoder_position = 0;  // cross keys/values and what follows their length, per input position
  int64_t per_switch = 0;            // SRformer's switch table, per entry (segment switch of the schedule)
  int64_t per_decoder_position = 0;  // self-attention caches, per generated token
  int64_t fixed = 0;                 // membrane, recurrent term, ||K||, segment windows
  int64_t segment_size = 0;          // of the switch table's schedule; 0 when there is no table

  StateFootprint& operator+=(const StateFootprint& other);

  // Switch-table entries of a row with `input_tokens` positions and expected length L: the segments
  // its schedule visits, at most min(m, L + 1) (m = ceil(input_tokens / segment_size)); 0 without a table.
  int64_t switches(int64_t input_tokens, int64_t expected_length) const;

  // A batch of `rows`, each padded to `encoder_positions`, `switches` table entries and
  // `decoder_positions` self-attention slots.
  int64_t bytes(int64_t rows, int64_t encoder_positions, int64_t switches, int64_t decoder_positions) const;
};

}  // namespace srformer
