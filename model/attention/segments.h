#pragma once
// Segment bookkeeping for segmented cross-attention: which decoder step reads which segment, and
// which encoder rows a segment holds, per row of the batch (rows have their own k, m and L).
#include <torch/types.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace srformer {

// m_b = ceil(k_b / s) (at least 1).
torch::Tensor num_segments(const torch::Tensor& enc_len, int64_t segment_size);

// i = min(floor(t * m / L), m - 1) elementwise (all int64, broadcastable).
torch::Tensor segment_schedule(const torch::Tensor& t, const torch::Tensor& m, const torch::Tensor& L);

// A row's step bound where it has none (every step of the schedule counts).
inline constexpr int64_t kUnboundedSteps = std::numeric_limits<int64_t>::max();

// The segments a row with m segments and expected length L visits in its first `steps` decoder steps,
// in order (i(t) for t = 0..min(L, steps - 1); steps after L stay in segment m - 1): min(m, L + 1)
// of them at most, and at most `steps`. A row ends after its max_new_tokens steps, so where that is
// below L the rest of the schedule is never reached (and needs no switch-table entry).
std::vector<int64_t> visited_segments(int64_t m, int64_t L, int64_t steps = kUnboundedSteps);
// How many that is, without listing them (0 when m, L or steps is not positive).
int64_t visited_segment_count(int64_t m, int64_t L, int64_t steps = kUnboundedSteps);

// Encoder row indices of a window of `width` rows starting at segment (seg + first_segment_offset):
// idx [n, width] (clamped into [0, kmax)), valid [n, width] (inside [0, k_b)).
struct SegmentWindow {
  torch::Tensor idx, valid;
};
SegmentWindow segment_window(const torch::Tensor& seg, const torch::Tensor& enc_len, int64_t segment_size,
                             int64_t first_segment_offset, int64_t width, int64_t kmax);

// The same windows as ranges of keys, per row: [first, first + count) = [max(base, 0), min(base +
// width, k_b)) with base = (seg + first_segment_offset) * segment_size (count 0 when empty). From the
// integers directly: decode steps ask for them in every layer.
struct WindowRanges {
  std::vector<int64_t> first, count;
};
WindowRanges window_ranges(const torch::Tensor& seg, const torch::Tensor& enc_len, int64_t segment_size,
                           int64_t first_segment_offset, int64_t width);

// Rows idx of x [n,H,k,d] per batch row -> [n,H,W,d]. With `batch_rows` [n] (defined), x is
// [B,H,k,d] and row j of the result reads batch row batch_rows[j], touching only W keys.
torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& batch_rows = {});

// Positions idx [n,W] of n rows' spans of a head-major pool x [H,N,d] (LayerState::cross_start): row
// j's span starts at starts[j] and holds len[j] positions, and idx is clamped into it (a masked position
// never reads another request's keys, or room never written). -> [n,H,W,d].
torch::Tensor gather_span_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& starts,
                               const torch::Tensor& len);

}  // namespace srformer
