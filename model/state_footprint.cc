#include "model/state_footprint.h"

#include <algorithm>

#include "model/attention/segments.h"
#include "model/attention/self_attention.h"

namespace srformer {

StateFootprint& StateFootprint::operator+=(const StateFootprint& other) {
  per_encoder_position += other.per_encoder_position;
  per_switch += other.per_switch;
  inputs_shared_by_beams = inputs_shared_by_beams || other.inputs_shared_by_beams;
  per_row_encoder_position += other.per_row_encoder_position;
  per_decoder_position += other.per_decoder_position;
  fixed += other.fixed;
  segment_size = std::max(segment_size, other.segment_size);
  return *this;
}

int64_t StateFootprint::switches(int64_t input_tokens, int64_t expected_length, int64_t max_steps) const {
  if (segment_size <= 0 || per_switch == 0) return 0;
  const int64_t m = std::max<int64_t>(1, (input_tokens + segment_size - 1) / segment_size);
  return visited_segment_count(m, std::max<int64_t>(1, expected_length), std::max<int64_t>(1, max_steps));
}

int64_t StateFootprint::bytes(const StateShape& b) const {
  const int64_t inputs = inputs_shared_by_beams
                             ? per_encoder_position * b.request_positions + per_switch * b.request_switches
                             : b.rows * (per_encoder_position * b.encoder_positions + per_switch * b.switches);
  return inputs + b.rows * (per_row_encoder_position * b.encoder_positions +
                            per_decoder_position * cache_capacity(b.decoder_positions) + fixed);
}

int64_t StateFootprint::request_bytes(int64_t rows, int64_t input_tokens, int64_t switches,
                                      int64_t decoder_positions) const {
  return bytes({1, rows, input_tokens, switches, decoder_positions, input_tokens, switches});
}

}  // namespace srformer
