#include "model/attention/segments.h"

#include <torch/torch.h>

#include <algorithm>

namespace srformer {

torch::Tensor num_segments(const torch::Tensor& enc_len, int64_t segment_size) {
  if (segment_size <= 0) return torch::ones_like(enc_len);
  return torch::div(enc_len + (segment_size - 1), segment_size, "floor").clamp_min(1);
}

torch::Tensor segment_schedule(const torch::Tensor& t, const torch::Tensor& m, const torch::Tensor& L) {
  return torch::minimum(torch::div(t * m, L, "floor"), m - 1);
}

std::vector<int64_t> visited_segments(int64_t m, int64_t L, int64_t steps) {
  std::vector<int64_t> segs;
  const int64_t n = visited_segment_count(m, L, steps);
  if (n == 0) return segs;
  segs.reserve(static_cast<size_t>(n));
  // O(segments), not O(L): walking every step took minutes for a huge L (and t * m overflowed).
  if (m <= L) {
    // The schedule advances by m / L <= 1 a step: it visits every segment up to the last step's.
    for (int64_t i = 0; i < n; ++i) segs.push_back(i);
    return segs;
  }
  // m > L: each of the L + 1 steps lands in a segment of its own (t * m < m^2 fits: m is a segment count).
  for (int64_t t = 0; t < n; ++t) segs.push_back(std::min(t * m / L, m - 1));  // segment_schedule, in integers
  return segs;
}

int64_t visited_segment_count(int64_t m, int64_t L, int64_t steps) {
  if (m <= 0 || L <= 0 || steps <= 0) return 0;
  // Steps 0..L reach every segment the schedule has (later ones stay in m - 1): every one when m <= L,
  // and when m > L one a step (the last clamped to m - 1).
  if (steps > L) return m <= L ? m : L + 1;
  const int64_t last = steps - 1;  // < L: the last step the row takes
  if (m > L) return last + 1;      // a new segment every step
  // Every segment from 0 to i(last) = floor(last * m / L) (< m as last < L), in 128 bits for a huge L.
  return static_cast<int64_t>(static_cast<__int128>(last) * m / L) + 1;
}

SegmentWindow segment_window(const torch::Tensor& seg, const torch::Tensor& enc_len, int64_t segment_size,
                             int64_t first_segment_offset, int64_t width, int64_t kmax) {
  const auto base = (seg + first_segment_offset) * segment_size;
  const auto idx = base.unsqueeze(1) + torch::arange(width, seg.options()).unsqueeze(0);
  const auto valid = idx.ge(0).logical_and(idx.lt(enc_len.unsqueeze(1)));
  return {idx.clamp(0, kmax - 1), valid};
}

WindowRanges window_ranges(const torch::Tensor& seg, const torch::Tensor& enc_len, int64_t segment_size,
                           int64_t first_segment_offset, int64_t width) {
  const auto s = seg.to(torch::kCPU, torch::kLong).contiguous();
  const auto len = enc_len.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t n = s.numel();
  WindowRanges out{std::vector<int64_t>(static_cast<size_t>(n)), std::vector<int64_t>(static_cast<size_t>(n))};
  for (int64_t b = 0; b < n; ++b) {
    const int64_t base = (s.data_ptr<int64_t>()[b] + first_segment_offset) * segment_size;
    const int64_t lo = std::max<int64_t>(base, 0);
    const int64_t hi = std::min(base + width, len.data_ptr<int64_t>()[b]);
    out.first[static_cast<size_t>(b)] = lo;
    out.count[static_cast<size_t>(b)] = std::max<int64_t>(hi - lo, 0);
  }
  return out;
}

torch::Tensor gather_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& batch_rows) {
  // Flat row numbers into x viewed as [B*H*k, d]: one index_select copies n*H*W whole rows of d
  // values (gather would index every element, ~5x slower per decode step).
  const auto rows = batch_rows.defined() ? batch_rows : torch::arange(x.size(0), idx.options());
  const int64_t H = x.size(1);
  const int64_t k = x.size(2);
  const int64_t d = x.size(3);
  const auto bh = rows.view({-1, 1}) * H + torch::arange(H, rows.options()).view({1, H});  // [n,H]
  const auto flat = (bh * k).unsqueeze(2) + idx.unsqueeze(1);                              // [n,H,W]
  return x.contiguous().view({-1, d}).index_select(0, flat.view(-1)).view({flat.size(0), H, idx.size(1), d});
}

torch::Tensor gather_span_rows(const torch::Tensor& x, const torch::Tensor& idx, const torch::Tensor& starts,
                               const torch::Tensor& len) {
  const auto last = (len - 1).clamp_min(0).unsqueeze(1);
  const auto pos = starts.unsqueeze(1) + torch::minimum(idx.clamp_min(0), last);  // [n,W]
  return x.index_select(1, pos.reshape(-1))
      .view({x.size(0), idx.size(0), idx.size(1), x.size(2)})
      .transpose(0, 1)
      .contiguous();
}

}  // namespace srformer
